"""A wait that times out says why the run has not ended (RunWaitTimeout), on every
backend: no live worker serves it, it is due later, it sleeps, it waits for a person, it
backs off before a retry, it waits its turn on a thread, or it waits for a free slot."""

from __future__ import annotations

import asyncio

import pytest

import runwright as rw

from .conftest import running_worker

SHORT_S = 0.2
UTC_INSTANT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


async def _why(handle: rw.RunHandle) -> rw.RunWaitTimeout:
    with pytest.raises(rw.RunWaitTimeout) as info:
        await handle.result(timeout_s=SHORT_S)
    error = info.value
    assert isinstance(error, TimeoutError) and isinstance(error, rw.RunwrightError)
    assert error.run_id == handle.id and error.timeout_s == SHORT_S
    assert str(error) == f"run {handle.id} did not end within {SHORT_S:g} s: {error.why}"
    assert "\n" not in str(error)
    return error


async def _parked(app: rw.App, handle: rw.RunHandle) -> None:
    async with asyncio.timeout(30):
        while (await handle.refresh()).state is not rw.RunState.QUEUED or handle.run.started_at is None:
            await asyncio.sleep(0.02)


async def test_a_run_no_live_worker_serves_says_so_and_how_to_start_one(app):
    @app.task(queue="gpu")
    async def render(ctx: rw.Context) -> None:
        return None

    error = await _why(await app.submit(render))
    assert error.why == ("no live worker runs task 'render' on queue 'gpu': start one "
                         "(runwright worker MODULE:APP --queues gpu)")


async def test_a_run_due_later_says_when(app):
    @app.task
    async def later(ctx: rw.Context) -> None:
        return None

    error = await _why(await app.submit(later, delay_s=3600))
    assert error.why.startswith("it is due at 20") and error.why.endswith("Z")


async def test_a_parked_run_says_what_it_waits_on(app):
    @app.task
    async def nap(ctx: rw.Context) -> str:
        await ctx.sleep(86400)
        return "rested"

    @app.task
    async def approve(ctx: rw.Context) -> bool:
        return bool(await ctx.ask("ship it?", schema=bool))

    @app.task(retries=2, backoff=rw.Backoff(base_s=3600))
    async def flaky(ctx: rw.Context) -> None:
        raise ConnectionError("down")

    async with running_worker(app):
        napping, asking, failing = (await app.submit(nap), await app.submit(approve), await app.submit(flaky))
        for handle in (napping, asking, failing):
            await _parked(app, handle)
        slept, asked, backing_off = await _why(napping), await _why(asking), await _why(failing)
    assert slept.why.startswith("it sleeps (ctx.sleep) until 20")
    assert asked.why == "it waits for a person's answer to its question (runwright questions; app.answer)"
    assert backing_off.why.startswith("attempt 1 failed; attempt 2 of 3 starts at 20")


async def test_a_run_behind_another_on_its_thread_waits_its_turn(app):
    @app.task
    async def reply(ctx: rw.Context, text: str) -> str:
        return text

    first = await app.submit(reply, "hi", thread="t-why")
    second = await app.submit(reply, "again", thread="t-why", on_busy="enqueue")
    error = await _why(second)
    assert error.why == f"it waits its turn on thread 't-why': run {first.id} goes first"


async def test_a_due_run_with_live_workers_busy_waits_for_a_slot(app):
    release = asyncio.Event()

    @app.task
    async def hold(ctx: rw.Context) -> None:
        await release.wait()

    async with running_worker(app, concurrency=1):
        holding = await app.submit(hold)
        async with asyncio.timeout(30):
            while (await holding.refresh()).state is not rw.RunState.RUNNING:
                await asyncio.sleep(0.02)
        waiting = await app.submit(hold)
        busy = await _why(waiting)
        running = await _why(holding)
        release.set()
        await holding.result(timeout_s=30)
        await waiting.result(timeout_s=30)
    assert busy.why == "it is due and waits for a free slot of the workers serving queue 'default'"
    assert running.why.startswith("it is running (attempt 1 of ")


async def test_a_run_whose_major_no_live_worker_runs_says_so(store_url):
    old, new = rw.App(store_url, version="1.0.0"), rw.App(store_url, version="2.0.0")
    for app in (old, new):
        @app.task(name="summarize")
        async def summarize(ctx: rw.Context) -> str:
            return "summary"

    async with old, new:
        async with running_worker(new):  # serves the task's queue, for major 2 only
            error = await _why(await old.submit("summarize"))
    assert error.why == ("no live worker can run it: the workers serving task 'summarize' on queue 'default' "
                         "do not run major 1 (the app version 1.0.0 submitted it); it is closed failed "
                         "(Unrunnable) once due for their --unrunnable-after-s")


async def test_lists_say_why_each_queued_run_waits_and_filter_by_it(app):
    """Every reason at once, in one store: what the store keeps (a park, a retry, a later
    start) and what only the world tells (no worker, a thread's turn, a busy slot), read
    for a whole list and filtered by, against a live worker."""
    W = rw.WaitReason
    release = asyncio.Event()

    @app.task
    async def nap(ctx: rw.Context) -> None:
        await ctx.sleep(86400)

    @app.task
    async def approve(ctx: rw.Context) -> bool:
        return bool(await ctx.ask("ship it?", schema=bool))

    @app.task(queue="nowhere")
    async def orphan(ctx: rw.Context) -> None:
        return None

    @app.task
    async def parent(ctx: rw.Context) -> None:
        await (await ctx.submit(orphan))

    @app.task(retries=2, backoff=rw.Backoff(base_s=3600))
    async def flaky(ctx: rw.Context) -> None:
        raise ConnectionError("down")

    @app.task
    async def hold(ctx: rw.Context) -> None:
        await release.wait()

    async with running_worker(app, concurrency=1):
        napping, asking, parenting, failing = [await app.submit(t) for t in (nap, approve, parent, flaky)]
        for handle in (napping, asking, parenting, failing):
            await _parked(app, handle)
        (child,) = [run for run in await app.list_runs(task="orphan")]
        later = await app.submit(hold, delay_s=3600)
        holding = await app.submit(hold)
        async with asyncio.timeout(30):
            while (await holding.refresh()).state is not rw.RunState.RUNNING:
                await asyncio.sleep(0.02)
        first = await app.submit(hold, thread="t-list")
        second = await app.submit(hold, thread="t-list", on_busy="enqueue")
        expected = {napping.id: W.SLEEP, asking.id: W.ANSWER, parenting.id: W.CHILDREN, failing.id: W.RETRY,
                    later.id: W.SCHEDULED, child.id: W.WORKER, first.id: W.SLOT, second.id: W.THREAD}
        queued = await app.list_runs(states=[rw.RunState.QUEUED])
        judged = await app.waiting(queued + [holding.run])
        filtered = {reason: {run.id for run in await app.list_runs(waiting=reason)} for reason in W}
        by_name = {run.id for run in await app.list_runs(waiting="answer")}
        release.set()
        for handle in (holding, first, second):
            await handle.result(timeout_s=30)
    assert {run_id: why.reason for run_id, why in judged.items()} == expected  # the running one: none
    for reason in W:
        assert filtered[reason] == {run_id for run_id, r in expected.items() if r is reason}, reason
    assert by_name == {asking.id}
    assert judged[napping.id].until is not None and judged[asking.id].until is None
    assert judged[second.id].detail == f"it waits its turn on thread 't-list': run {first.id} goes first"


async def test_a_filter_that_is_no_reason_is_refused_naming_the_reasons(app):
    with pytest.raises(rw.InvalidInput, match="waiting must be one of sleep, answer, signal, children"):
        await app.list_runs(waiting="napping")
