"""The completer on every backend: a close ends it once what was handed in is written,
with no cancel (a cancel that a store's client loses would have held a worker's stop);
while a worker has a backlog, a batch waits for the runs still going, within bounds."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

import pytest

import runwright as rw
from runwright.engine._completer import GATHER_BATCH, Completer
from runwright.engine._worker import WorkerConfig
from runwright.errors import ConfigError
from runwright.runs import RunState
from runwright.store._params import RunFinishParams

from ..conformance.helpers import claim, insert, worker


async def test_close_writes_what_was_handed_in_then_ends_the_completer(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert() for _ in range(5)])
    runs = await store.run_claim(claim(wid, limit=5))
    completer = Completer(store)
    flushing = asyncio.create_task(completer.run())
    finishes = [asyncio.create_task(completer.finish(RunFinishParams(run.id, run.fence, RunState.SUCCEEDED,
                                                                     result="1")))
                for run in runs]
    await asyncio.sleep(0)  # the finishes are handed in
    completer.close()
    done, _ = await asyncio.wait([flushing], timeout=30)
    assert flushing in done and flushing.exception() is None, "the completer ended on its own"
    await asyncio.gather(*finishes)  # each was answered: durable, not refused
    ended = await store.run_get_many([run.id for run in runs])
    assert sorted(run.state for run in ended) == [RunState.SUCCEEDED] * 5


async def test_runs_claimed_along_with_finishes_as_a_stop_comes_are_drained_not_given_back(app):
    """A worker with a backlog claims with its batches of finishes. A stop that comes while
    such a batch is being written waits for its claim to land and drains those runs as it
    drains the others: they run once, to their end, and none is given back."""
    ran: list[int] = []

    @app.task
    async def quick(ctx, n: int) -> int:
        ran.append(n)
        await asyncio.sleep(0.3)  # still running when the runs of before the stop have ended
        return n

    store = app.store
    writing, go_on = asyncio.Event(), asyncio.Event()
    write_both = store.run_finish_claim

    async def held_write(params, claim):  # the real write, once the test lets it go
        writing.set()
        await go_on.wait()
        return await write_both(params, claim)

    handles = await app.submit_many("quick", [{"n": n} for n in range(40)])
    store.run_finish_claim = held_write
    worker = app.worker(concurrency=4, poll_s=0.2)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(writing.wait(), 30)  # finishes and a claim are on their way
        worker.stop()
        await asyncio.sleep(0.2)  # the stop is under way, waiting for that claim
        go_on.set()
        await asyncio.wait_for(task, 60)
    finally:
        go_on.set()
        store.run_finish_claim = write_both
    assert worker.stats.released == 0 and worker.stats.claimed == worker.stats.succeeded > 4
    runs = [await h.refresh() for h in handles]
    done = sorted(h.value() for h in runs if h.state is rw.RunState.SUCCEEDED)
    assert sorted(ran) == done and all(h.state in (rw.RunState.SUCCEEDED, rw.RunState.QUEUED)
                                       for h in runs)


async def _claimed(store, runs: int) -> list[rw.Run]:
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert() for _ in range(runs)])
    return await store.run_claim(claim(wid, limit=runs))


def _batches_of(store, *writes: str) -> list[int]:
    """The size of each batch of finishes `store` writes from now on, through `writes`
    (default: run_finish_many)."""
    sizes: list[int] = []
    for name in writes or ("run_finish_many",):
        write = getattr(store, name)

        async def counted(params, *rest, write=write):
            sizes.append(len(params))
            return await write(params, *rest)

        setattr(store, name, counted)
    return sizes


def _succeeded(run: rw.Run) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1")


async def test_a_batch_waits_for_the_runs_still_going_and_writes_them_together(store):
    """While `gathering` holds, the first finish wakes the completer but is not written:
    the finishes after it are gathered, and the one that ends the gathering writes all."""
    runs = await _claimed(store, 4)
    batches, going = _batches_of(store), {"on": True}
    completer = Completer(store, gathering=lambda: going["on"], gather_s=60)
    flushing = asyncio.create_task(completer.run())
    finishes = []
    for run in runs[:3]:
        finishes.append(asyncio.create_task(completer.finish(_succeeded(run))))
        await asyncio.sleep(0.05)  # the completer is awake and waiting, not writing
    assert batches == [], "a finish was written while the runs it waits for were going"
    going["on"] = False  # the last run ends
    finishes.append(asyncio.create_task(completer.finish(_succeeded(runs[3]))))
    await asyncio.wait_for(asyncio.gather(*finishes), 30)  # far less than gather_s
    completer.close()
    await asyncio.wait_for(flushing, 30)
    assert batches == [4]
    assert [r.state for r in await store.run_get_many([r.id for r in runs])] == [RunState.SUCCEEDED] * 4


async def test_a_gathering_batch_is_written_once_its_oldest_finish_waited_gather_s(store):
    (run,) = await _claimed(store, 1)
    batches = _batches_of(store)
    completer = Completer(store, gathering=lambda: True, gather_s=0.2)
    flushing = asyncio.create_task(completer.run())
    began = time.monotonic()
    await asyncio.wait_for(completer.finish(_succeeded(run)), 30)
    assert time.monotonic() - began >= 0.2 and batches == [1]  # it waited, then wrote alone
    completer.close()
    await asyncio.wait_for(flushing, 30)


async def test_a_batch_stops_gathering_at_gather_batch_finishes(store):
    runs = await _claimed(store, GATHER_BATCH)
    batches = _batches_of(store)
    completer = Completer(store, gathering=lambda: True, gather_s=60)
    flushing = asyncio.create_task(completer.run())
    await asyncio.wait_for(asyncio.gather(*(completer.finish(_succeeded(run)) for run in runs)), 30)
    assert batches == [GATHER_BATCH]
    completer.close()
    await asyncio.wait_for(flushing, 30)


async def test_without_a_backlog_a_finish_is_written_at_once(store):
    (run,) = await _claimed(store, 1)
    completer = Completer(store, gather_s=60)  # gathering: never
    flushing = asyncio.create_task(completer.run())
    await asyncio.wait_for(completer.finish(_succeeded(run)), 30)  # not after gather_s
    completer.close()
    await asyncio.wait_for(flushing, 30)


async def test_a_worker_with_a_backlog_writes_the_runs_a_claim_started_together(app):
    """Four slots, forty runs due: the first claim is full (a backlog). Its runs end one by
    one, 50 ms apart; their finishes go in one batch, with the next claim."""
    permits: asyncio.Queue[None] = asyncio.Queue()

    @app.task
    async def held(ctx, n: int) -> int:
        await permits.get()
        return n

    sizes = _batches_of(app.store, "run_finish_claim", "run_finish_many")
    handles = await app.submit_many("held", [{"n": n} for n in range(40)])
    worker = app.worker(concurrency=4, finish_gather_s=60)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(4):
            permits.put_nowait(None)
            await asyncio.sleep(0.05)
        for _ in range(36):
            permits.put_nowait(None)
        assert [await asyncio.wait_for(h.result(), 30) for h in handles] == list(range(40))
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert sizes[0] == 4 and sum(sizes) == 40


@asynccontextmanager
async def _held_runs(app) -> AsyncIterator[asyncio.Event]:
    """A worker of four slots that waits up to a minute to gather finishes, running task
    `job`: a run with long=True holds its slot until the event yielded is set."""
    release = asyncio.Event()

    @app.task
    async def job(ctx, long: bool) -> bool:
        if long:
            await release.wait()
        return long

    worker = app.worker(concurrency=4, finish_gather_s=60)
    task = asyncio.create_task(worker.run())
    try:
        yield release
    finally:
        release.set()
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_a_run_still_going_from_an_earlier_claim_holds_no_batch(app):
    """A long run started alone; then a backlog of quick runs for the other three slots.
    Their batches wait for the runs of their own claim only: with finish_gather_s at a
    minute, all forty end while the long run still holds its slot."""
    async with _held_runs(app) as release:
        long = await app.submit("job", long=True)
        for _ in range(300):  # its claim (one run for four slots) is no backlog
            if (await long.refresh()).state is RunState.RUNNING:
                break
            await asyncio.sleep(0.05)
        quick = await app.submit_many("job", [{"long": False} for _ in range(40)])
        assert [await asyncio.wait_for(h.result(), 30) for h in quick] == [False] * 40
        assert (await long.refresh()).state is RunState.RUNNING
        release.set()
        assert await asyncio.wait_for(long.result(), 30) is True


async def test_a_worker_without_a_backlog_writes_each_end_at_once(app):
    """Two runs for four slots, claimed together: no backlog, so nothing waits for the other run."""
    async with _held_runs(app) as release:
        quick, slow = await app.submit_many("job", [{"long": False}, {"long": True}])
        assert await asyncio.wait_for(quick.result(), 30) is False  # not held for the slow one
        assert (await slow.refresh()).state is RunState.RUNNING
        release.set()
        assert await asyncio.wait_for(slow.result(), 30) is True


def test_finish_gather_s_below_zero_is_refused():
    with pytest.raises(ConfigError, match="finish_gather_s"):
        WorkerConfig(finish_gather_s=-1)
