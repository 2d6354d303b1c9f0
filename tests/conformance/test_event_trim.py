"""Retention's trim of long logs, on every backend: a log keeps its last `keep` events
behind one `trimmed` marker that names the first seq kept; seqs are never renumbered; a
reader from any earlier seq meets the marker first; appends go on after a trim; a
thread's log loses the same events and keeps its numbers."""

from __future__ import annotations

import json

from runwright.runs import RunState
from runwright.store._params import EventAppendParams, EventListParams, EventTrimParams, RunFinishParams

from .helpers import T0, claim, insert, worker
from .test_thread_cancel_and_follow import thread_log, threaded


async def _emit(store, run, count: int) -> None:
    assert await store.event_append(EventAppendParams(
        run.id, run.fence, [("progress", json.dumps({"n": i})) for i in range(count)], now=T0))


async def _log(store, run_id: int, after: int = 0) -> list[tuple[int, str]]:
    return [(e.seq, e.kind) for e in await store.event_list(EventListParams(run_id, after, limit=1000))]


async def test_a_long_log_keeps_its_last_events_behind_a_marker(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert(), insert()])
    long, short = await store.run_claim(claim(wid))
    await _emit(store, long, 20)  # seqs 1 submitted, 2 started, 3..22 progress
    await _emit(store, short, 3)  # 5 events in all
    before = await _log(store, long.id)

    dry = await store.event_trim(EventTrimParams(keep=5, dry_run=True, now=T0 + 1))
    assert (dry.run_ids, dry.events) == ([long.id], 17)
    assert await _log(store, long.id) == before, "a dry run removes nothing"

    cut = await store.event_trim(EventTrimParams(keep=5, now=T0 + 1))
    assert (cut.run_ids, cut.events) == ([long.id], 17)
    log = await store.event_list(EventListParams(long.id))
    assert [(e.seq, e.kind) for e in log] == [(17, "trimmed"), *before[-5:]]
    assert log[0].data == {"first_seq": 18, "removed": 17}
    for after in (0, 3, 16):  # from any seq before the marker: the marker first
        assert await _log(store, long.id, after) == [(17, "trimmed"), *before[-5:]]
    assert await _log(store, long.id, 17) == before[-5:]
    assert await _log(store, long.id, 20) == before[-2:], "seqs are not renumbered"
    assert len(await _log(store, short.id)) == 5, "a log within the bound is untouched"
    assert (await store.event_trim(EventTrimParams(keep=5, now=T0 + 1))).run_ids == []

    await _emit(store, long, 3)  # appends go on, numbered after the last
    assert await _log(store, long.id, 22) == [(23, "progress"), (24, "progress"), (25, "progress")]
    again = await store.event_trim(EventTrimParams(keep=5, now=T0 + 2))
    assert (again.run_ids, again.events) == ([long.id], 3)
    assert [seq for seq, _ in await _log(store, long.id)] == [20, 21, 22, 23, 24, 25]
    assert (await store.event_list(EventListParams(long.id)))[0].data == {"first_seq": 21, "removed": 20}
    await store.run_finish_many([RunFinishParams(long.id, long.fence, RunState.SUCCEEDED, result="1",
                                                 now=T0 + 3)])
    assert (await _log(store, long.id))[-1] == (26, "succeeded"), "the run's end is logged after"


async def test_a_trim_is_bounded_and_the_next_one_goes_on(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert() for _ in range(5)])
    runs = await store.run_claim(claim(wid))
    for run in runs:
        await _emit(store, run, 4)
    first = await store.event_trim(EventTrimParams(keep=2, limit=2, now=T0))
    second = await store.event_trim(EventTrimParams(keep=2, limit=2, now=T0))
    third = await store.event_trim(EventTrimParams(keep=2, limit=2, now=T0))
    assert sorted(first.run_ids + second.run_ids + third.run_ids) == [r.id for r in runs]
    assert [len(first.run_ids), len(second.run_ids), len(third.run_ids)] == [2, 2, 1]
    for run in runs:
        assert [kind for _, kind in await _log(store, run.id)] == ["trimmed", "progress", "progress"]


async def test_a_threads_log_loses_the_trimmed_events_and_keeps_its_numbers(store):
    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("a"))
    (run,) = await store.run_claim(claim(wid))
    await _emit(store, run, 6)
    before = await thread_log(store)
    assert [(e.seq, e.tseq) for e in before] == [(n, n) for n in range(1, 9)]
    await store.event_trim(EventTrimParams(keep=3, now=T0))
    after = await thread_log(store)
    assert [(e.seq, e.tseq, e.kind) for e in after] == [
        (5, 5, "trimmed"), (6, 6, "progress"), (7, 7, "progress"), (8, 8, "progress")]
    assert await thread_log(store, after=5) == after[1:]
