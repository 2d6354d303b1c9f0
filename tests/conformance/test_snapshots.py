"""Snapshots bound what a resume reads of the journal, on every backend."""

from __future__ import annotations

import json

from runwright.runs import RunState
from runwright.store._params import RunFinishParams, RunRetryParams, StepRecordParams

from .helpers import T0, claim, insert, step_record, worker


async def _claimed(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert()])
    (run,) = await store.run_claim(claim(wid))
    return wid, run


async def _journal(store, run, names: list[str], start: int = 0) -> None:
    for offset, name in enumerate(names):
        status, result, error = "done", json.dumps(offset), None
        if name == "fail":
            status, result, error = "failed", None, json.dumps({"type": "Boom", "message": "x"})
        elif name == "snapshot":
            result = json.dumps({"state": {"at": start + offset}})
        assert await step_record(store, StepRecordParams(run.id, run.fence, start + offset, name,
                                                        status, result, error, now=T0))


async def test_a_resume_reads_the_journal_from_the_last_snapshot(store):
    _, run = await _claimed(store)
    assert await store.step_list_resumable(run.id) == []
    await _journal(store, run, ["a", "b", "c"])
    whole = await store.step_list_resumable(run.id)
    assert [s.position for s in whole] == [0, 1, 2], "no snapshot: the whole journal"
    await _journal(store, run, ["snapshot", "d", "e", "snapshot", "f"], start=3)
    tail = await store.step_list_resumable(run.id)
    assert [(s.position, s.name) for s in tail] == [(6, "snapshot"), (7, "f")]
    assert tail[0].value() == {"state": {"at": 6}}
    assert [s.position for s in await store.step_list(run.id)] == list(range(8)), \
        "the whole journal is still there for whoever reads it all"


async def test_a_journaled_position_before_a_snapshot_is_never_written_again(store):
    _, run = await _claimed(store)
    await _journal(store, run, ["a", "snapshot", "b"])
    again = StepRecordParams(run.id, run.fence, 0, "a", "done", '"other"', None, now=T0)
    assert not await step_record(store, again)
    assert (await store.step_list(run.id))[0].value() == 0


async def test_a_retry_that_runs_a_failure_again_drops_the_snapshots_after_it(store):
    _, run = await _claimed(store)
    # A failed step the code caught and went past, then two snapshots.
    await _journal(store, run, ["a", "snapshot", "fail", "b", "snapshot", "c", "snapshot"])
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.FAILED, error='{"type": "Boom"}', now=T0 + 1)]) == []
    await store.run_retry(RunRetryParams(run.id, now=T0 + 2))
    kept = await store.step_list(run.id)
    assert [(s.position, s.name) for s in kept] == [(0, "a"), (1, "snapshot"), (3, "b"), (5, "c")]
    tail = await store.step_list_resumable(run.id)
    assert [(s.position, s.name) for s in tail] == [(1, "snapshot"), (3, "b"), (5, "c")], \
        "the resume starts at the last snapshot taken before the failure"
