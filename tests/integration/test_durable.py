"""Durable execution in one process: the journal, replay, timers, children, events."""

from __future__ import annotations

import asyncio
import time

import pytest

import runwright as rw
from runwright.store._params import EventListParams, RunListParams

from .conftest import running_worker

FAST = rw.Backoff(base_s=0.01, factor=2, cap_s=0.05)


async def test_a_retried_run_replays_journaled_steps_without_running_them(app):
    calls: list[str] = []

    async def charge(amount: int) -> dict:
        calls.append("charge")
        return {"charged": amount}

    def ship(order: dict) -> str:
        calls.append("ship")
        if calls.count("ship") == 1:
            raise ConnectionError("carrier down")
        return f"shipped {order['charged']}"

    @app.task(retries=2, backoff=FAST)
    async def order(ctx: rw.Context, amount: int) -> str:
        charged = await ctx.step("charge", charge, amount)
        return await ctx.step("ship", ship, charged)

    async with running_worker(app):
        handle = await app.submit(order, 30)
        assert await handle.result(timeout_s=30) == "shipped 30"
    assert calls == ["charge", "ship", "ship"]  # charge ran once, across two attempts
    steps = await app.store.step_list(handle.id)
    assert [(s.position, s.name, s.status) for s in steps] == [(0, "charge", "done"), (1, "ship", "done")]
    kinds = [e.kind for e in await app.store.event_list(EventListParams(handle.id))]
    assert kinds == ["submitted", "started", "step", "retrying", "started", "step", "succeeded"]


async def test_a_step_that_changes_name_on_replay_is_a_non_determinism_error(app):
    names = iter(["first", "renamed"])

    @app.task(retries=1, backoff=FAST)
    async def drifting(ctx: rw.Context) -> None:
        await ctx.step(next(names), lambda: 1)
        raise ConnectionError("fail after the step, so that the run replays")

    async with running_worker(app):
        with pytest.raises(rw.RunFailed, match="NonDeterminismError: .*step #0 is 'renamed' in this "
                                               "replay, but the journal holds 'first'") as info:
            await (await app.submit(drifting)).result(timeout_s=30)
    assert info.value.state == "failed"


async def test_a_final_step_error_is_journaled_and_raised_again_on_replay(app):
    calls = []

    def refuse() -> None:
        calls.append(1)
        raise rw.FinalError("card declined")

    @app.task(retries=2, backoff=FAST)
    async def pay(ctx: rw.Context) -> str:
        try:
            await ctx.step("charge", refuse)
        except rw.StepFailed as exc:
            if ctx.attempt == 1:
                raise ConnectionError("retry the run") from exc
            return f"{exc.error['type']}: {exc.error['message']} (attempt {ctx.attempt})"

    async with running_worker(app):
        assert await (await app.submit(pay)).result(timeout_s=30) == "FinalError: card declined (attempt 2)"
    assert calls == [1]


async def test_step_retries_and_unserializable_results(app):
    attempts = []

    def flaky() -> int:
        attempts.append(1)
        if len(attempts) < 3:
            raise TimeoutError("slow")
        return 7

    @app.task(retries=0)
    async def job(ctx: rw.Context) -> int:
        value = await ctx.step("flaky", flaky, retry=rw.RetryPolicy(retries=3, backoff=FAST))
        await ctx.step("bad", lambda: object())
        return value

    async with running_worker(app):
        handle = await app.submit(job)
        with pytest.raises(rw.RunFailed, match="SerializationError: result of step 'bad'"):
            await handle.result(timeout_s=30)
    assert len(attempts) == 3
    assert [s.name for s in await app.store.step_list(handle.id)] == ["flaky"]  # nothing for "bad"


async def test_a_durable_sleep_gives_the_slot_back(app):
    order: list[str] = []

    @app.task
    async def sleeper(ctx: rw.Context) -> float:
        order.append("sleeper starts")
        await ctx.sleep(0.5)
        order.append("sleeper wakes")
        return time.time()

    @app.task
    async def quick(ctx: rw.Context) -> None:
        order.append("quick")

    async with running_worker(app, concurrency=1):
        slept = await app.submit(sleeper)
        await asyncio.sleep(0)  # submit order: the sleeper first
        other = await app.submit(quick, delay_s=0.1)
        await other.result(timeout_s=30)
        woke_at = await slept.result(timeout_s=30)
    # With one slot, `quick` could only run while the sleeper was parked.
    assert order == ["sleeper starts", "quick", "sleeper starts", "sleeper wakes"]
    wake = (await app.store.step_list(slept.id))[0].value()["until"]
    assert woke_at >= wake
    kinds = [e.kind for e in await app.store.event_list(EventListParams(slept.id))]
    assert kinds == ["submitted", "started", "step", "parked", "started", "succeeded"]


async def test_children_fan_out_and_in_and_a_failure_reaches_the_parent(app):
    @app.task(retries=0)
    async def square(ctx: rw.Context, n: int) -> int:
        if n < 0:
            raise rw.FinalError(f"negative {n}")
        return n * n

    @app.task
    async def total(ctx: rw.Context, count: int) -> dict:
        children = [await ctx.submit(square, n) for n in range(count)]
        values = await ctx.gather(*children)
        bad = await ctx.submit(square, -1)
        try:
            await bad
        except rw.ChildFailed as exc:
            return {"sum": sum(values), "failed": exc.state}
        return {"sum": sum(values), "failed": None}

    async with running_worker(app, concurrency=4):
        handle = await app.submit(total, 10)
        assert await handle.result(timeout_s=60) == {"sum": sum(n * n for n in range(10)), "failed": "failed"}
    children = [r for r in await app.store.run_list(RunListParams(task="square"))]
    assert len(children) == 11 and {r.parent_id for r in children} == {handle.id}
    assert len({r.key for r in children}) == 11


async def test_a_replay_gets_the_child_its_first_attempt_made_though_its_arguments_changed(app):
    """The attempt that made a child died before journaling it (a crash point there); the
    replay submits it again under the same derived key, with arguments its code computed
    anew (the attempt number): it gets that same child, not a KeyConflict, not a second one.
    With a key of the task's own, the same."""
    from runwright.engine import _crashpoints as crashpoints

    @app.task(retries=0)
    async def echo(ctx: rw.Context, attempt: int) -> int:
        return attempt

    @app.task(retries=2, backoff=FAST)
    async def parent(ctx: rw.Context, own_key: bool) -> int:
        child = await ctx.submit(echo, attempt=ctx.attempt, key=f"echo-{ctx.run_id}" if own_key else None)
        return await child

    try:
        async with running_worker(app):
            crashpoints.arm("child.after_insert", "raise", times=1)
            derived = await app.submit(parent, own_key=False)
            assert await derived.result(timeout_s=60) == 1  # the child of attempt 1, run once
            crashpoints.arm("child.after_insert", "raise", times=1)
            own = await app.submit(parent, own_key=True)
            assert await own.result(timeout_s=60) == 1
    finally:
        crashpoints.disarm()
    for handle in (derived, own):
        assert (await handle.refresh()).attempt == 2
        children = await app.list_runs(task="echo", limit=10)
        assert len([c for c in children if c.parent_id == handle.id]) == 1


async def test_a_child_key_that_names_another_run_submitted_otherwise_is_a_conflict(app):
    @app.task(retries=0)
    async def echo(ctx: rw.Context, n: int) -> int:
        return n

    @app.task(retries=0)
    async def parent(ctx: rw.Context, n: int, mode: str) -> dict:
        try:
            child = await ctx.submit(echo, n=n, key="shared", on_conflict=mode)
        except rw.KeyConflict as exc:
            return {"conflict": exc.run_id, "differs": exc.differs}
        return {"child": child.id, "value": await child}

    taken = await app.submit(echo, n=1, key="shared")
    async with running_worker(app):
        same = await app.submit(parent, n=1, mode="reject")
        assert await same.result(timeout_s=60) == {"child": taken.id, "value": 1}
        other = await app.submit(parent, n=2, mode="reject")
        assert await other.result(timeout_s=60) == {"conflict": taken.id, "differs": ["arguments"]}
        accepted = await app.submit(parent, n=2, mode="return")
        assert await accepted.result(timeout_s=60) == {"child": taken.id, "value": 1}
    assert len(await app.list_runs(task="echo")) == 1


async def test_a_child_key_conflict_left_uncaught_fails_the_parent_at_once_without_retry(app):
    """No retry can change a KeyConflict (the run its key names stays as it was submitted):
    the parent ends `failed` at its first attempt with the conflict as its error, not
    `dead` after every attempt of its retries."""
    attempts: list[int] = []

    @app.task(retries=0)
    async def echo(ctx: rw.Context, n: int) -> int:
        return n

    @app.task(retries=3, backoff=FAST)
    async def parent(ctx: rw.Context) -> int:
        attempts.append(ctx.attempt)
        return await (await ctx.submit(echo, n=2, key="taken"))

    taken = await app.submit(echo, n=1, key="taken")
    async with running_worker(app):
        handle = await app.submit(parent)
        with pytest.raises(rw.RunFailed, match=f"KeyConflict: key 'taken' names run {taken.id}") as info:
            await handle.result(timeout_s=30)
    assert info.value.state == "failed"
    assert attempts == [1]
    assert (await handle.refresh()).attempt == 1


async def test_cancelling_a_parent_cancels_its_open_children(app):
    @app.task
    async def forever(ctx: rw.Context) -> None:
        await ctx.sleep(3600)

    @app.task
    async def parent(ctx: rw.Context) -> None:
        child = await ctx.submit(forever)
        await child

    async with running_worker(app):
        handle = await app.submit(parent)
        async for item in handle.events():
            if item.kind == "parked":
                break
        await handle.cancel()
        with pytest.raises(rw.RunCancelled):
            await handle.result(timeout_s=30)
        (child,) = await app.store.run_list(RunListParams(task="forever"))
        # The child may have been running (its worker stops it) or parked (ended at once).
        with pytest.raises(rw.RunCancelled):
            await (await app.get(child.id)).result(timeout_s=30)


async def test_emit_and_follow_from_any_point(app, store_url):
    gate = asyncio.Event()

    @app.task
    async def progress(ctx: rw.Context) -> str:
        for pct in (25, 50):
            await ctx.emit("progress", {"pct": pct})
        await gate.wait()
        await ctx.emit("progress", {"pct": 100})
        return "done"

    async with running_worker(app):
        handle = await app.submit(progress)
        seen = []
        async with rw.App(store_url) as follower:  # another connection follows live
            async for item in follower.events(handle.id):
                seen.append((item.seq, item.kind, item.data))
                if item.data == {"pct": 50}:
                    gate.set()
        resumed = [(e.seq, e.kind) async for e in handle.events(after=3)]
    assert [s for s, _, _ in seen] == list(range(1, len(seen) + 1))
    assert [k for _, k, _ in seen] == ["submitted", "started", *["progress"] * 3, "succeeded"]
    assert resumed == [(s, k) for s, k, _ in seen[3:]]
    with pytest.raises(ValueError, match="reserved"):
        from runwright.engine._context import Context

        await Context(app.runtime, handle.run, 0).emit("succeeded")


STEPS_WITH_SNAPSHOTS = 30


@pytest.mark.parametrize("restores", [True, False], ids=["restore", "no-restore"])
async def test_a_resume_after_a_snapshot_runs_no_step_twice(app, restores):
    """With `ctx.restore()` the resume starts after the last snapshot; without it, the
    code replays from the top, and the journal before the snapshot is read when needed.
    Either way each step ran once and the sum is whole."""
    made: list[int] = []
    failed: list[int] = []

    def add(i: int) -> int:
        made.append(i)
        if i == 25 and not failed:
            failed.append(i)
            raise ConnectionError("the attempt fails once, after the snapshot at 20")
        return i

    @app.task(retries=2, backoff=FAST)
    async def summing(ctx: rw.Context) -> int:
        state = (await ctx.restore() if restores else None) or {"i": 0, "total": 0}
        while state["i"] < STEPS_WITH_SNAPSHOTS:
            state["total"] += await ctx.step("add", add, state["i"])
            state["i"] += 1
            if state["i"] % 10 == 0:
                await ctx.snapshot(state)
        return state["total"]

    async with running_worker(app):
        handle = await app.submit(summing)
        assert await handle.result(timeout_s=30) == sum(range(STEPS_WITH_SNAPSHOTS))
    assert made == [*range(26), *range(25, STEPS_WITH_SNAPSHOTS)], "25 ran again (it failed), none else"
    with pytest.raises(ValueError, match="snapshot"):
        await rw.Context(app.runtime, await handle.refresh(), 0).step("snapshot", add, 1)


@pytest.mark.parametrize("restores", [True, False], ids=["restore", "no-restore"])
async def test_an_emit_is_logged_once_across_retries_and_resumes(app, restores):
    """An emit between steps is part of the run's history: a run retried twice (a step
    fails once before its snapshot and once after it) and replayed each time (from the
    top, or from its last snapshot with `ctx.restore()`) logs each emit once, in order,
    and each replayed emit returns its first seq. An emit inside a step's function is
    that execution's: made again when the step runs again."""
    fails_once = {3, 7}

    async def work(ctx: rw.Context, i: int) -> int:
        await ctx.emit("inner", {"i": i})
        if i in fails_once:
            fails_once.discard(i)
            raise ConnectionError(f"step {i} fails once")
        return i

    @app.task(retries=3, backoff=FAST)
    async def emitting(ctx: rw.Context) -> list[int]:
        state = (await ctx.restore() if restores else None) or {"i": 0, "seqs": []}
        while state["i"] < 10:
            state["seqs"].append(await ctx.emit("progress", {"i": state["i"]}))
            await ctx.step("work", work, ctx, state["i"])
            state["i"] += 1
            if state["i"] == 5:
                await ctx.snapshot(state)
        return state["seqs"]

    async with running_worker(app):
        handle = await app.submit(emitting)
        seqs = await handle.result(timeout_s=30)
    log = await app.store.event_list(EventListParams(handle.id))
    progress = [e for e in log if e.kind == "progress"]
    assert [e.data["i"] for e in progress] == list(range(10)), "each emit once, in order"
    assert seqs == [e.seq for e in progress], "a replayed emit returns its first seq"
    assert [e.data["i"] for e in log if e.kind == "inner"] == [0, 1, 2, 3, 3, 4, 5, 6, 7, 7, 8, 9]
    assert [e.kind for e in log].count("retrying") == 2
