"""ctx.wait_event with an in-process worker, on every backend: the match, the timeout (its
registration closed, so a later event is not delivered), two waits of one run, the tasks
declared on an event, and what is refused at the edge."""

from __future__ import annotations

import pytest

import runwright as rw
from runwright.errors import ConfigError, InvalidInput
from runwright.runs import WaitReason
from runwright.store._event_params import EventWaitListParams

from ..process.harness import wait_until
from .conftest import running_worker


def _tasks(app: rw.App) -> tuple[rw.TaskSpec, rw.TaskSpec]:
    @app.task(retries=0)
    async def waits(ctx: rw.Context, doc_id: str, timeout_s: float | None = None) -> object:
        try:
            return await ctx.wait_event("doc.ready", match={"doc.id": doc_id}, timeout_s=timeout_s)
        except TimeoutError as exc:
            return f"timeout: {exc}"

    @app.task(retries=0)
    async def waits_twice(ctx: rw.Context) -> list:
        first = await ctx.wait_event("step.done", match={"n": 1})
        second = await ctx.wait_event("step.done", match={"n": 2})
        return [first, second]

    return waits, waits_twice


async def _parked(app: rw.App, run_id: int) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.waiting == WaitReason.SIGNAL


async def test_a_wait_gets_the_event_that_fits_once_and_times_out_closed(app: rw.App) -> None:
    waits, _ = _tasks(app)
    fits = await app.submit(waits, doc_id="a")
    timing_out = await app.submit(waits, doc_id="a", timeout_s=0.3)
    async with running_worker(app):
        await wait_until(lambda: _parked(app, fits.id), "the run parks on its wait")
        assert (await app.publish_event("doc.ready", {"doc": {"id": "b"}})).woken == []
        assert await timing_out.result(timeout_s=30) == (
            "timeout: no event 'doc.ready' that fits the wait's match came within its timeout")
        published = await app.publish_event("doc.ready", {"doc": {"id": "a"}, "size": 3})
        assert published.woken == [fits.id], "the timed-out wait is closed: not delivered to"
        assert await fits.result(timeout_s=30) == {"doc": {"id": "a"}, "size": 3}
    states = {run_id: [w.state for w in await app.store.event_wait_list(EventWaitListParams(run_id))]
              for run_id in (fits.id, timing_out.id)}
    assert states == {fits.id: ["delivered"], timing_out.id: ["closed"]}
    assert await app.signals(timing_out.id) == []


async def test_two_waits_of_one_run_each_get_their_own_event(app: rw.App) -> None:
    _, waits_twice = _tasks(app)
    handle = await app.submit(waits_twice)
    async with running_worker(app):
        await wait_until(lambda: _parked(app, handle.id), "the run parks on its first wait")
        # The second wait is not registered yet: its event now is not delivered to it.
        assert (await app.publish_event("step.done", {"n": 2})).woken == []
        assert (await app.publish_event("step.done", {"n": 1})).woken == [handle.id]

        async def second_registered() -> bool:
            waits = await app.store.event_wait_list(EventWaitListParams(handle.id))
            return len(waits) == 2 and await _parked(app, handle.id)

        await wait_until(second_registered, "the run parks on its second wait")
        assert (await app.publish_event("step.done", {"n": 2})).woken == [handle.id]
        assert await handle.result(timeout_s=30) == [{"n": 1}, {"n": 2}]


async def test_a_task_on_an_event_is_started_once_per_id_with_its_data(app: rw.App) -> None:
    @app.task(on_event="order.placed")
    async def confirm(event: dict) -> str:
        return f"confirmed {event['order']}"

    @app.task(on_event="order.placed", queue="audit")
    def audit(event: dict, note: str = "") -> dict:
        return event

    first = await app.publish_event("order.placed", {"order": "o-1"}, id="o-1")
    assert len(first.started) == 2 and not first.existed
    again = await app.publish_event("order.placed", {"order": "o-1"}, id="o-1")
    assert (again.started, again.existed) == ([], True)
    runs = {(await app.get(run_id)).run.task: run_id for run_id in first.started}
    assert set(runs) == {"confirm", "audit"}
    assert (await app.get(runs["confirm"])).run.key == "event:o-1:confirm"
    async with running_worker(app, queues=["default", "audit"]):
        assert await (await app.get(runs["confirm"])).result(timeout_s=30) == "confirmed o-1"
        assert await (await app.get(runs["audit"])).result(timeout_s=30) == {"order": "o-1"}


async def test_bad_names_matches_and_declarations_are_refused_at_the_edge(app: rw.App) -> None:
    for name, data, event_id, why in [("no spaces", {}, None, "event name"),
                                      ("ok", {1, 2}, None, "JSON"),
                                      ("ok", {}, "", "event id")]:
        with pytest.raises(InvalidInput, match=why):
            await app.publish_event(name, data, id=event_id)
    with pytest.raises(ConfigError, match="named `event`"):
        @app.task(on_event="order.placed")
        async def no_event(order: dict) -> None: ...
    with pytest.raises(ConfigError, match="requires order"):
        @app.task(on_event="order.placed")
        async def more(event: dict, order: dict) -> None: ...
    with pytest.raises(ConfigError, match="event name"):
        @app.task(on_event="bad name")
        async def badly(event: dict) -> None: ...

    from runwright.core._events import check_match, matches

    for bad in ({"": 1}, {"a..b": 1}, {"a": object()}, [("a", 1)]):
        with pytest.raises(InvalidInput):
            check_match(bad)  # type: ignore[arg-type]
    assert matches({"a.b": [1, {"c": None}]}, {"a": {"b": [1.0, {"c": None}]}})
    assert not matches({"a": 1}, {"a": True}) and not matches({"a": {}}, {"a": []})
