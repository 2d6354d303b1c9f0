"""A fork of a run, on every backend with a real worker: the steps it copied replay their
recorded results (never called again), the step forked from and every later one run on
the code deployed now, edited arguments reach them, and both runs name each other."""

from __future__ import annotations

from collections import Counter

import pytest

import runwright as rw

from ..conftest import BACKENDS
from .conftest import running_worker


@pytest.fixture(params=[*BACKENDS, "memory"])
def backend(request: pytest.FixtureRequest) -> str:
    """The in-process backend too: a worker in this process runs its forks as any other's."""
    return str(request.param)


def order_task(app: rw.App, calls: Counter, fixed: dict[str, bool]):
    @app.task
    async def order(ctx: rw.Context, qty: int) -> dict:
        async def call(name: str, value: object) -> object:
            calls[name] += 1
            if name == "charge" and not fixed["charge"]:
                raise rw.FinalError("card processor rejected the request")  # the bug of version N
            return value

        item = await ctx.step("fetch", call, "fetch", "widget")
        total = await ctx.step("plan", call, "plan", qty * 3)
        charged = await ctx.step("charge", call, "charge", total)
        shipped = await ctx.step("ship", call, "ship", f"{qty} x {item}")
        return {"charged": charged, "shipped": shipped}

    return order


async def test_a_failed_run_forked_from_its_failing_step_runs_on_the_fix_without_repeating_its_steps(app):
    calls: Counter = Counter()
    fixed = {"charge": False}
    order = order_task(app, calls, fixed)
    async with running_worker(app):
        original = await app.submit(order, qty=2)
        with pytest.raises(rw.RunFailed, match="card processor rejected"):
            await original.result(timeout_s=30)
        assert calls == Counter(fetch=1, plan=1, charge=1)
        fixed["charge"] = True  # version N+1 is deployed
        fork = await original.fork("charge")
        assert fork.run.forked_from == original.id and not fork.existed
        assert await fork.result(timeout_s=30) == {"charged": 6, "shipped": "2 x widget"}
    # fetch and plan replayed from the copy; charge ran again, on the fix; ship ran once.
    assert calls == Counter(fetch=1, plan=1, charge=2, ship=1)
    assert [(s.name, s.status) for s in await app.steps(fork.id)] == [
        ("fetch", "done"), ("plan", "done"), ("charge", "done"), ("ship", "done")]
    assert [run.id for run in await app.forks(original.id)] == [fork.id]
    assert (await original.refresh()).state is rw.RunState.FAILED  # the original stays as it ended


async def test_a_fork_with_edited_arguments_runs_them_from_the_step_it_forked_from(app):
    calls: Counter = Counter()
    order = order_task(app, calls, {"charge": True})
    async with running_worker(app):
        original = await app.submit(order, qty=2)
        assert await original.result(timeout_s=30) == {"charged": 6, "shipped": "2 x widget"}
        # From position 1 (plan): fetch is replayed, plan and later steps run with qty=5.
        edited = await app.fork(original.id, 1, args={"qty": 5}, key="redo-qty-5")
        assert edited.arguments() == {"qty": 5}
        assert await edited.result(timeout_s=30) == {"charged": 15, "shipped": "5 x widget"}
        again = await app.fork(original.id, 1, args={"qty": 5}, key="redo-qty-5")
        assert again.existed and again.id == edited.id
        # From the journal's end: every step replays, nothing is called.
        replayed = await original.fork(4)
        assert await replayed.result(timeout_s=30) == {"charged": 6, "shipped": "2 x widget"}
    assert calls == Counter(fetch=1, plan=2, charge=2, ship=2)


async def test_bad_forks_are_refused_before_anything_is_written(app):
    order = order_task(app, Counter(), {"charge": True})
    original = await app.submit(order, qty=1, delay_s=3600)
    past = r"from_step=1 is past the end of run \d+'s journal \(it holds no step yet: fork from 0\)"
    with pytest.raises(rw.InvalidInput, match=past):
        await app.fork(original.id, 1)
    with pytest.raises(rw.InvalidInput, match="journaled no step of that name"):
        await app.fork(original.id, "charge")
    with pytest.raises(rw.InvalidInput, match="from_step"):
        await app.fork(original.id, -1)
    with pytest.raises(rw.BadArguments):
        await app.fork(original.id, 0, args={"qty": "many"})
    with pytest.raises(rw.RunNotFound):
        await app.tenant("bob").fork(original.id, 0)
    other = await app.submit(order, qty=1, key="taken", delay_s=3600)
    with pytest.raises(rw.KeyConflict, match="not a fork of run"):
        await app.fork(original.id, 0, key="taken")
    assert await app.forks(original.id) == [] and other.run.forked_from is None
