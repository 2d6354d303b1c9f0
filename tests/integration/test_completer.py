"""The completer on every backend: a close ends it once what was handed in is written,
with no cancel (a cancel that a store's client loses would have held a worker's stop)."""

from __future__ import annotations

import asyncio

import runwright as rw
from runwright.engine.completer import Completer
from runwright.runs import RunState
from runwright.store.params import RunFinishParams

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
