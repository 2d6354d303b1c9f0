"""The completer on every backend: a close ends it once what was handed in is written,
with no cancel (a cancel that a store's client loses would have held a worker's stop)."""

from __future__ import annotations

import asyncio

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
