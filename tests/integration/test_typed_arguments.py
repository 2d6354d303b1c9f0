"""A task's arguments checked against its type hints at submission, on every backend: what
does not fit is refused in one line naming the argument, and nothing is written; what fits
is coerced (lax, as FastAPI does) and stored as JSON, from which the worker rebuilds the
same typed values (a pydantic model, a datetime) before calling the function."""

from __future__ import annotations

import datetime as dt

import pydantic
import pytest

import runwright as rw
from runwright.store._params import RunCountParams

from .conftest import running_worker

NOT_AN_INT = ("task 'double': argument 'n': Input should be a valid integer, unable to parse string as an "
              "integer (got 'abc')")


class Line(pydantic.BaseModel):
    sku: str
    qty: int = 1


class Order(pydantic.BaseModel):
    lines: list[Line]
    due: dt.datetime


def _tasks(app: rw.App) -> None:
    @app.task(retries=0)
    async def double(ctx: rw.Context, n: int) -> int:
        return 2 * n

    @app.task(retries=0)
    async def price(ctx: rw.Context, order: Order, rate: float = 1.0) -> dict:
        # What the function receives: the model and its datetime, rebuilt from the stored JSON.
        assert isinstance(order, Order) and isinstance(order.lines[0], Line), order
        assert isinstance(order.due, dt.datetime) and order.due.tzinfo is not None, order.due
        return {"total": sum(line.qty for line in order.lines) * rate, "due": order.due.isoformat()}

    @app.task(retries=0)
    async def order_one(ctx: rw.Context, sku: str) -> dict:
        # A child given a model instance: stored as its JSON, rebuilt for the child.
        due = dt.datetime(2026, 12, 1, 9, tzinfo=dt.UTC)
        return await (await ctx.submit("price", Order(lines=[Line(sku=sku, qty=2)], due=due), rate="0.5"))


async def _nothing_written(app: rw.App) -> None:
    assert await app.store.run_count_by_state(RunCountParams()) == {}


async def test_arguments_that_do_not_fit_are_refused_naming_the_argument_and_nothing_is_written(app):
    _tasks(app)
    with pytest.raises(rw.BadArguments) as refused:
        await app.submit("double", n="abc")
    assert str(refused.value) == NOT_AN_INT
    with pytest.raises(rw.BadArguments) as refused:
        await app.submit_many("double", [{"n": 1}, {"n": "2"}, {"n": "abc"}])
    assert str(refused.value) == f"item 2: {NOT_AN_INT}"  # one bad item: none of the batch written
    with pytest.raises(rw.BadArguments) as refused:
        await app.submit("price", order={"lines": [{"qty": 2}]}, due="x")
    assert str(refused.value).startswith("task 'price': got an unexpected keyword argument 'due'; "
                                         "signature is (order: 'Order'")  # the signature first, as before
    with pytest.raises(rw.BadArguments) as refused:
        await app.submit("price", order={"lines": [{"qty": "two"}], "due": "soon"}, rate="nan")
    assert str(refused.value) == (
        "task 'price': argument 'order.lines.0.sku': Field required; argument 'order.lines.0.qty': Input "
        "should be a valid integer, unable to parse string as an integer (got 'two'); argument "
        "'order.due': Input should be a valid datetime or date, input is too short (got 'soon'); "
        "argument 'rate': Input should be a finite number (got 'nan')")
    await _nothing_written(app)


async def test_what_fits_is_stored_coerced_as_json(app):
    _tasks(app)
    handle = await app.submit("double", n="21")
    assert handle.run.arguments() == {"n": 21}
    assert handle.arguments() == {"n": 21}  # the handle app.submit returns says it too (README)
    many = await app.submit_many("double", [{"n": "1"}, rw.Call({"n": 2.0}, key="k")])
    assert [h.run.arguments() for h in many] == [{"n": 1}, {"n": 2}]
    paris = dt.timezone(dt.timedelta(hours=2))
    order = Order(lines=[Line(sku="a")], due=dt.datetime(2026, 12, 1, 9, tzinfo=paris))
    stored = (await app.submit("price", order)).run.arguments()
    assert stored == {"order": {"lines": [{"sku": "a", "qty": 1}], "due": "2026-12-01T09:00:00+02:00"}}


async def test_a_model_argument_reaches_the_worker_as_the_model_and_a_child_gets_one_too(app):
    _tasks(app)
    async with running_worker(app):
        direct = await app.submit("price", order={"lines": [{"sku": "a", "qty": "3"}, {"sku": "b"}],
                                                  "due": "2026-12-01T09:00:00Z"}, rate="2")
        assert await direct.result(timeout_s=30) == {"total": 8.0, "due": "2026-12-01T09:00:00+00:00"}
        parent = await app.submit("order_one", sku="z")
        assert await parent.result(timeout_s=30) == {"total": 1.0, "due": "2026-12-01T09:00:00+00:00"}
        assert await (await app.submit("double", n="4")).result(timeout_s=30) == 8


async def test_stored_arguments_that_no_longer_fit_fail_the_run_at_once(app, store_url):
    """Runs an older version stored (its task had no hint): the worker's check refuses them
    with the same words, and the run ends failed without a retry (none could help)."""

    @app.task(name="legacy", retries=3)
    async def legacy_then(ctx: rw.Context, n) -> int:
        return n

    fits, misfits = await app.submit("legacy", n="7"), await app.submit("legacy", n="seven")
    newer = rw.App(store_url)

    @newer.task(name="legacy", retries=3)
    async def legacy_now(ctx: rw.Context, n: int) -> int:
        return n + 1

    async with newer:
        async with running_worker(newer):
            assert await fits.result(timeout_s=30) == 8  # "7" then, coerced now
            with pytest.raises(rw.RunFailed) as failed:
                await misfits.result(timeout_s=30)
    run = (await app.get(misfits.id)).run
    assert run.state is rw.RunState.FAILED and run.attempt == 1
    assert "FinalError: task 'legacy': argument 'n': Input should be a valid integer" in str(failed.value)


async def test_a_schedule_stores_its_arguments_checked_and_coerced(app):
    _tasks(app)
    schedule = app.schedule("hourly", cron="0 * * * *", task="double", args={"n": "3"})
    assert schedule.arguments() == {"n": 3}
    with pytest.raises(rw.BadArguments, match="^task 'double': argument 'n': Input should be a valid int"):
        app.schedule("broken", cron="0 * * * *", task="double", args={"n": "three"})
    assert set(app.schedules) == {"hourly"}
