"""The journal writer on every backend: the steps of runs in flight share writes, and each
is still judged alone (its fence, its position, gapless logs)."""

from __future__ import annotations

import asyncio
from typing import Sequence

from runwright.engine._journal_writer import JournalWriter
from runwright.store._interface import Store
from runwright.store._params import EventListParams, StepRecordParams

from ..conformance.helpers import T0, claim, insert, worker


class Batches:
    """The real store, with the sizes of the journal batches it was sent written down."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sizes: list[int] = []

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        self.sizes.append(len(params))
        return await self.store.step_record_many(params)


async def _claimed(store: Store, count: int) -> list:
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert() for _ in range(count)])
    return sorted(await store.run_claim(claim(wid, limit=count)), key=lambda r: r.id)


async def test_steps_of_runs_in_flight_share_writes_and_each_is_journaled(store):
    runs = await _claimed(store, 20)
    batches = Batches(store)
    writer = JournalWriter(batches)  # type: ignore[arg-type]

    async def run_steps(run) -> list[bool]:
        return [await writer.record(StepRecordParams(run.id, run.fence, position, f"s{position}", "done",
                                                     str(position), now=T0)) for position in range(5)]

    answers = await asyncio.gather(*(run_steps(run) for run in runs))
    assert answers == [[True] * 5] * 20
    assert sum(batches.sizes) == 100 and len(batches.sizes) < 100, "steps arriving together share a write"
    for run in runs:
        assert [s.position for s in await store.step_list(run.id)] == [0, 1, 2, 3, 4]
        assert [e.seq for e in await store.event_list(EventListParams(run.id))] == list(range(1, 8))


async def test_a_refused_step_is_refused_alone_and_two_of_one_run_go_in_turn(store):
    good, zombie = await _claimed(store, 2)
    batches = Batches(store)
    writer = JournalWriter(batches)  # type: ignore[arg-type]
    answers = await asyncio.gather(
        writer.record(StepRecordParams(good.id, good.fence, 0, "a", "done", "1", now=T0)),
        writer.record(StepRecordParams(good.id, good.fence, 1, "b", "done", "2", now=T0)),
        writer.record(StepRecordParams(zombie.id, zombie.fence + 1, 0, "a", "done", "1", now=T0)))
    assert answers == [True, True, False]
    assert batches.sizes == [2, 1], "one step per run in a batch: the second of `good` waits its turn"
    assert [s.name for s in await store.step_list(good.id)] == ["a", "b"]
    assert await store.step_list(zombie.id) == []
