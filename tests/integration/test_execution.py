"""Runs executed by an in-process worker: outcomes, retries, cancel, order, blinks."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import asyncpg
import pytest

import runwright as rw
from runwright.engine import _crashpoints as crashpoints

from ..conftest import PG_BASE
from .conftest import assert_cuts_cost_a_long_run_no_takeover, running_worker

FAST = rw.Backoff(base_s=0.01, factor=2, cap_s=0.05)


async def wait_for_log(caplog, text: str, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not any(text in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.02)


async def test_a_run_succeeds_and_any_app_reads_its_result(app, store_url):
    @app.task
    async def add(ctx: rw.Context, a: int, b: int) -> dict:
        return {"sum": a + b, "attempt": ctx.attempt, "run": ctx.run_id}

    async with running_worker(app):
        handle = await app.submit(add, 2, 3)
        value = await handle.result(timeout_s=30)
    assert value == {"sum": 5, "attempt": 1, "run": handle.id}
    async with rw.App(store_url) as elsewhere:  # another connection, no registry
        assert await (await elsewhere.get(handle.id)).result(timeout_s=5) == value
    run = await handle.refresh()
    assert run.state is rw.RunState.SUCCEEDED and run.fence == 1 and run.finished_at >= run.started_at


async def test_failures_retry_with_backoff_then_go_dead_and_retry_requeues(app):
    calls: list[int] = []
    healthy = asyncio.Event()

    @app.task(retries=2, backoff=FAST)
    async def flaky(ctx: rw.Context) -> str:
        calls.append(ctx.attempt)
        if not healthy.is_set():
            raise ConnectionError(f"down at attempt {ctx.attempt}")
        return "up"

    async with running_worker(app):
        handle = await app.submit(flaky)
        with pytest.raises(rw.RunFailed, match="ended dead: ConnectionError: down at attempt 3") as info:
            await handle.result(timeout_s=30)
        assert info.value.state == "dead" and calls == [1, 2, 3]
        healthy.set()
        retried = await app.retry(handle.id)
        assert retried.state is rw.RunState.QUEUED
        assert await retried.result(timeout_s=30) == "up"
    assert calls == [1, 2, 3, 1]


async def test_final_errors_fail_at_once_without_retry(app):
    attempts = []

    @app.task(retries=5, backoff=FAST, give_up_on=[KeyError])
    async def strict(ctx: rw.Context, kind: str) -> None:
        attempts.append(kind)
        raise rw.FinalError("bad input for good") if kind == "final" else KeyError("missing")

    @app.task(retries=5, backoff=FAST, retry_on=[ConnectionError])
    async def picky(ctx: rw.Context) -> None:
        attempts.append("picky")
        raise ValueError("not a connection problem")

    async with running_worker(app):
        for handle in [await app.submit(strict, "final"), await app.submit(strict, "key"),
                       await app.submit(picky)]:
            with pytest.raises(rw.RunFailed, match="ended failed"):
                await handle.result(timeout_s=30)
    assert sorted(attempts) == ["final", "key", "picky"]


async def test_a_result_that_does_not_serialize_fails_the_run_clearly(app):
    @app.task
    async def returns_a_set(ctx: rw.Context) -> set:
        return {1, 2}

    async with running_worker(app):
        with pytest.raises(rw.RunFailed, match="SerializationError: result of task 'returns_a_set'"):
            await (await app.submit(returns_a_set)).result(timeout_s=30)


async def test_timeouts_are_retried_then_dead(app):
    @app.task(timeout_s=0.05, retries=1, backoff=FAST)
    async def slow(ctx: rw.Context) -> None:
        await asyncio.sleep(10)

    async with running_worker(app):
        with pytest.raises(rw.RunFailed, match="TaskTimeout: attempt 2 ran past timeout_s=0.05"):
            await (await app.submit(slow)).result(timeout_s=30)


async def test_sync_tasks_run_in_a_thread(app):
    @app.task
    def blocking(ctx: rw.Context, seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    async with running_worker(app):
        assert await (await app.submit(blocking, 0.01)).result(timeout_s=30) == "done"


async def test_cancel_a_queued_run_and_it_never_starts(app):
    started = []

    @app.task
    async def job(ctx: rw.Context) -> None:
        started.append(ctx.run_id)

    handle = await app.submit(job, delay_s=0.3)
    assert await handle.cancel() is rw.RunState.CANCELLED
    marker = await app.submit(job, delay_s=0.5)
    async with running_worker(app):
        await marker.result(timeout_s=30)
    assert started == [marker.id]
    with pytest.raises(rw.RunCancelled):
        await handle.result(timeout_s=1)
    with pytest.raises(rw.RunEnded):
        await handle.cancel()


async def test_cancel_a_running_run_stops_it(app):
    entered, stopped = asyncio.Event(), asyncio.Event()

    @app.task
    async def forever(ctx: rw.Context) -> None:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.set()
            raise

    async with running_worker(app):
        handle = await app.submit(forever)
        await asyncio.wait_for(entered.wait(), 30)
        assert await handle.cancel() is rw.RunState.RUNNING  # requested; its worker stops it
        with pytest.raises(rw.RunCancelled):
            await handle.result(timeout_s=30)
    assert stopped.is_set()
    assert (await handle.refresh()).state is rw.RunState.CANCELLED


async def test_runs_start_in_priority_then_due_then_submission_order(app):
    order: list[str] = []

    @app.task
    async def mark(ctx: rw.Context, name: str) -> None:
        order.append(name)

    now = time.time()
    await app.submit(mark, "low", priority=rw.LOW)
    await app.submit(mark, "normal-1")
    await app.submit(mark, "normal-earlier", run_at=now - 10)
    await app.submit(mark, "normal-2")
    last = await app.submit(mark, "critical", priority=rw.CRITICAL)
    async with running_worker(app, concurrency=1):
        await (await app.submit(mark, "after", priority=rw.LOW)).result(timeout_s=30)
        await last.result(timeout_s=30)
    assert order == ["critical", "normal-earlier", "normal-1", "normal-2", "low", "after"]


async def test_a_delayed_run_does_not_start_before_its_time(app):
    @app.task
    async def noop(ctx: rw.Context) -> float:
        return time.time()

    async with running_worker(app):
        handle = await app.submit(noop, delay_s=0.4)
        started = await handle.result(timeout_s=30)
    assert started >= handle.run.run_at


async def test_a_worker_leaves_runs_of_tasks_it_does_not_register_and_says_so(app, store_url, caplog):
    other = rw.App(store_url)

    @other.task
    async def gpu_only(ctx: rw.Context) -> None: ...

    @app.task
    async def cpu(ctx: rw.Context) -> str:
        return "cpu"

    async with other:
        foreign = await other.submit(gpu_only)
        with caplog.at_level(logging.WARNING, logger="runwright"):
            async with running_worker(app, orphan_check_s=0.05, orphan_age_s=0, rescue_interval_s=0.05):
                assert await (await app.submit(cpu)).result(timeout_s=30) == "cpu"
                await wait_for_log(caplog, "due runs of task 'gpu_only' wait for a worker")
        assert (await foreign.refresh()).state is rw.RunState.QUEUED


async def test_graceful_stop_gives_back_what_does_not_finish_in_the_grace(app):
    entered = asyncio.Event()

    @app.task
    async def long(ctx: rw.Context) -> str:
        entered.set()
        await asyncio.sleep(3600)

    async with running_worker(app, drain_grace_s=0.1) as worker:
        handle = await app.submit(long)
        await asyncio.wait_for(entered.wait(), 30)
    run = await handle.refresh()
    assert run.state is rw.RunState.QUEUED and run.attempt == 1 and run.owner is None  # it goes on
    assert worker.stats.released == 1


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite has no sessions to sever
async def test_a_database_that_blinks_mid_run_fails_no_run(app, store_url):
    schema = store_url.split("schema=")[1]

    @app.task
    async def step(ctx: rw.Context, n: int) -> int:
        await asyncio.sleep(0.02)
        return n

    admin = await asyncpg.connect(PG_BASE)
    try:
        async with running_worker(app, concurrency=20):
            handles = await app.submit_many(step, [{"n": n} for n in range(300)])
            for _ in range(3):
                await asyncio.sleep(0.15)
                killed = await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE starts_with(application_name, $1)", f"runwright:{schema}:")
                assert killed > 0
            values = [await h.result(timeout_s=60) for h in handles]
    finally:
        await admin.close()
    assert values == list(range(300))


@pytest.mark.parametrize("backend", ["postgres"])  # SQLite has no sessions to sever
async def test_a_flapping_database_costs_a_long_run_no_takeover(app, store_url):
    schema = store_url.split("schema=")[1]
    admin = await asyncpg.connect(PG_BASE)
    try:
        await assert_cuts_cost_a_long_run_no_takeover(app, lambda: admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE starts_with(application_name, $1)", f"runwright:{schema}:"))
    finally:
        await admin.close()


async def test_a_side_task_that_dies_stops_the_worker_loudly(app, caplog):
    @app.task
    async def noop(ctx: rw.Context) -> None: ...

    worker = app.worker(poll_s=0.05)
    started = asyncio.Event()
    running = asyncio.create_task(worker.run(ready=lambda _w: started.set()))
    await asyncio.wait_for(started.wait(), 30)
    crashpoints.arm("worker.claim_loop", "raise")  # an error that is not a store blink
    try:
        await app.submit(noop)  # wakes the claim loop
        with pytest.raises(rw.WorkerCrashed, match="side task _claim_loop died.*worker.claim_loop"):
            await asyncio.wait_for(running, 30)
    finally:
        crashpoints.disarm()
    assert any("side task _claim_loop died; the worker stops" in r.getMessage() for r in caplog.records)
    assert await app.store.worker_list() == []  # it deregistered on the way out


async def test_a_stop_before_the_worker_is_up_is_a_clean_stop(app):
    @app.task
    async def noop(ctx: rw.Context) -> None: ...

    worker = app.worker()
    worker.stop()
    await asyncio.wait_for(worker.run(), 30)  # no WorkerCrashed
    assert await app.store.worker_list() == []


async def test_dead_letters_show_their_attempts_and_can_be_retried_in_bulk(app):
    @app.task(retries=2, backoff=FAST)
    async def doomed(ctx: rw.Context, n: int) -> None:
        raise ConnectionError(f"attempt {ctx.attempt} of {n}")

    @app.task
    async def fine(ctx: rw.Context) -> None: ...

    async with running_worker(app):
        dead = [await app.submit(doomed, n) for n in range(3)]
        for handle in dead:
            with pytest.raises(rw.RunFailed, match="ended dead"):
                await handle.result(timeout_s=30)
        ok = await app.submit(fine)
        await ok.result(timeout_s=30)
    attempts = await app.attempts(dead[0].id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "retrying"), (2, "retrying"), (3, "dead")]
    assert [a.error for a in attempts] == [f"ConnectionError: attempt {n} of 0" for n in (1, 2, 3)]
    assert all(a.ended_at >= a.started_at for a in attempts)
    done, refused = await app.retry_many([d.id for d in dead] + [ok.id, 424242])
    assert sorted(h.id for h in done) == sorted(d.id for d in dead)
    assert set(refused) == {ok.id, 424242} and "already ended succeeded" in refused[ok.id]
    assert {(await h.refresh()).state for h in done} == {rw.RunState.QUEUED}


async def test_no_more_functions_run_at_once_than_the_workers_concurrency(app):
    # A slot is given back when the function returns (its fenced finish goes on without
    # it), never before: at most `concurrency` functions are ever running.
    running, most = 0, 0

    @app.task
    async def busy(ctx: rw.Context) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    async with running_worker(app, concurrency=3):
        handles = await app.submit_many(busy, [{} for _ in range(60)])
        for handle in handles:
            await handle.result(timeout_s=60)
    assert 1 <= most <= 3


@pytest.mark.parametrize("claim_batch", [0, 300])
async def test_a_claim_asks_for_at_most_claim_batch_else_what_the_store_takes_best(app, store_url,
                                                                                    claim_batch):
    """500 slots before a backlog of 450: a claim asks for `claim_batch` runs when it is
    set; left at 0, for all the free slots, but at most 200 on Redis, which serves one
    claim at a time (RunStore.claim_most)."""
    @app.task
    async def quick(ctx: rw.Context) -> None:
        return None

    asked: list[int] = []
    store = app.store
    claim, finish_claim = store.run_claim, store.run_finish_claim

    async def counted_claim(params):
        asked.append(params.limit)
        return await claim(params)

    async def counted_finish_claim(finishes, params):
        asked.append(params.limit)
        return await finish_claim(finishes, params)

    store.run_claim, store.run_finish_claim = counted_claim, counted_finish_claim
    handles = await app.submit_many(quick, [{} for _ in range(450)])
    async with running_worker(app, concurrency=500, claim_batch=claim_batch):
        for handle in handles:
            await handle.result(timeout_s=60)
    most = claim_batch or (200 if store_url.startswith("redis") else 500)
    assert asked[0] == most, "the first claim, with every slot free, asks for the most it may"
    assert max(asked) == most


async def test_a_cancelled_blocking_task_holds_its_slot_until_its_thread_returns(app):
    # A plain function runs in a thread that no cancel can stop: its slot must not go to
    # another run while it still runs, and it can see ctx.cancelled to stop early.
    entered, saw_cancel = threading.Event(), threading.Event()
    timeline: list[str] = []

    @app.task
    def grind(ctx: rw.Context) -> str:
        entered.set()
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        saw_cancel.set()
        time.sleep(0.3)  # still running after it saw the cancel
        timeline.append("grind returned")
        return "stopped early"

    @app.task
    async def next_one(ctx: rw.Context) -> None:
        timeline.append("next started")

    async with running_worker(app, concurrency=1):
        handle = await app.submit(grind)
        await asyncio.to_thread(entered.wait, 30)
        after = await app.submit(next_one)
        await app.cancel(handle.id)
        await after.result(timeout_s=60)
    assert saw_cancel.is_set()
    assert timeline == ["grind returned", "next started"]
    assert (await handle.refresh()).state is rw.RunState.CANCELLED


async def test_a_run_retried_at_once_into_the_same_worker_stays_that_workers_to_cancel(app):
    """A run that fails and is due again at once is claimed again by the batch that writes
    its failure, while its first attempt's task is still winding down. The first attempt's
    end must not take the second attempt's place in the worker: it did (by run id), and the
    second attempt, no longer the worker's, had its lease never renewed and a cancel never
    delivered (or, had its task not started yet, never ran at all).

    As many runs as slots: the claim brings them all (a backlog, so the batch of their
    failures claims along with it), and that claim finds them re-queued."""
    failed_once: set[int] = set()
    again: set[int] = set()

    @app.task(retries=3, backoff=rw.Backoff(base_s=0.0, factor=1, cap_s=0.0, jitter=0.0))
    async def flaky(ctx: rw.Context, n: int) -> int:
        if ctx.run_id not in failed_once:
            failed_once.add(ctx.run_id)
            raise ConnectionError("first attempt")
        again.add(ctx.run_id)
        await asyncio.sleep(3600)  # until cancelled
        return n

    async with running_worker(app, concurrency=8, lease_s=120):
        handles = await app.submit_many(flaky, [{"n": n} for n in range(8)])
        async with asyncio.timeout(60):
            while len(again) < 8:
                await asyncio.sleep(0.02)
        for handle in handles:
            await handle.cancel()
        for handle in handles:
            with pytest.raises(rw.RunCancelled):
                await handle.result(timeout_s=60)  # far below the lease (120 s)
    runs = [await handle.refresh() for handle in handles]
    assert {(run.state, run.attempt) for run in runs} == {(rw.RunState.CANCELLED, 2)}
