"""Fenced writes, leases, rescue: the core guarantee, on every backend."""

from __future__ import annotations

import json

import pytest

from runwright.errors import LeaseLost, RunEnded, RunNotFound, RunNotRetryable
from runwright.runs import RunState
from runwright.store._params import (
    EventListParams,
    RunCancelParams,
    RunExtendParams,
    RunFinishParams,
    RunListParams,
    RunReclaimParams,
    RunRescueParams,
    RunRetryParams,
)

from .helpers import T0, claim, insert, worker


async def _claimed(store, lease_s: float = 30.0, max_attempts: int = 3):
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([insert(max_attempts=max_attempts)])
    (claimed,) = await store.run_claim(claim(wid, lease_s=lease_s))
    return wid, claimed


async def test_finish_with_the_current_fence_is_durable(store):
    _, run = await _claimed(store)
    refused = await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED,
                                                           result='"ok"', now=T0 + 1)])
    assert refused == []
    stored = await store.run_get(run.id)
    assert stored.state is RunState.SUCCEEDED and stored.value() == "ok"
    assert stored.finished_at == T0 + 1 and stored.owner is None


async def test_a_superseded_owner_cannot_finish_extend_or_requeue(store):
    old_worker, run = await _claimed(store, lease_s=5)
    new_worker = await store.worker_register(worker())
    rescued = await store.run_rescue_many(RunRescueParams(now=T0 + 6, worker_stale_s=1e9))
    assert [r.id for r in rescued] == [run.id]
    (retaken,) = await store.run_claim(claim(new_worker, now=T0 + 6))
    assert retaken.fence == run.fence + 1
    # Every write of the zombie is refused and changes nothing.
    for target in (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD, RunState.CANCELLED, RunState.QUEUED):
        refused = await store.run_finish_many([RunFinishParams(
            run.id, run.fence, target, result='"zombie"', error='{"type":"Z"}', now=T0 + 7)])
        assert refused == [run.id]
    extended = await store.run_extend(RunExtendParams(old_worker, [(run.id, run.fence)], 30, now=T0 + 7))
    assert extended.lost == [run.id]
    stored = await store.run_get(run.id)
    assert stored.state is RunState.RUNNING and stored.fence == retaken.fence and stored.owner == new_worker
    assert stored.result is None and stored.lease_expires_at == T0 + 6 + 30
    # The new owner's writes still go through.
    assert await store.run_finish_many([RunFinishParams(run.id, retaken.fence, RunState.SUCCEEDED,
                                                        result='"new"', now=T0 + 8)]) == []
    assert (await store.run_get(run.id)).value() == "new"


async def _parked_parent(store, wid: int):
    """A run claimed and parked until its child ends, and that child, not yet submitted."""
    (parent,) = await store.run_insert_many([insert()])
    (parent,) = await store.run_claim(claim(wid, limit=1))
    park = RunFinishParams(parent.id, parent.fence, RunState.QUEUED, release=True, run_at=T0 + 3600,
                           event_kind="parked", event_data='{"until": 0}', now=T0)
    assert await store.run_finish_many([park]) == []
    child = insert()
    child.parent_id = parent.id
    return parent, child


async def test_one_finish_batch_judges_each_end_alone(store):
    """Ends, a retry, a stale fence and a child's end in one batch: each is written (or
    refused) as it would be alone, with its own event, and the child wakes its parent."""
    wid = await store.worker_register(worker())
    parent, child = await _parked_parent(store, wid)
    await store.run_insert_many([insert(), insert(), insert(), insert(), child])
    ok, failed, retried, stale, kid = await store.run_claim(claim(wid, limit=5))
    batch = [RunFinishParams(ok.id, ok.fence, RunState.SUCCEEDED, result='"ok"', now=T0 + 1),
             RunFinishParams(failed.id, failed.fence, RunState.FAILED, error='{"type": "F"}',
                             event_data='{"why": 1}', now=T0 + 1),
             RunFinishParams(retried.id, retried.fence, RunState.QUEUED, error='{"type": "R"}',
                             run_at=T0 + 60, event_kind="retrying", now=T0 + 1),
             RunFinishParams(stale.id, stale.fence + 1, RunState.SUCCEEDED, result="1", now=T0 + 1),
             RunFinishParams(kid.id, kid.fence, RunState.SUCCEEDED, result="2", now=T0 + 1)]
    assert await store.run_finish_many(batch) == [stale.id]
    ids = [r.id for r in (ok, failed, retried, stale, kid)]
    runs = {run.id: run for run in await store.run_get_many(ids)}
    assert runs[ok.id].state is RunState.SUCCEEDED and runs[ok.id].value() == "ok"
    assert runs[failed.id].state is RunState.FAILED and json.loads(runs[failed.id].error) == {"type": "F"}
    assert runs[retried.id].state is RunState.QUEUED and runs[retried.id].run_at == T0 + 60
    assert runs[stale.id].state is RunState.RUNNING and runs[stale.id].result is None
    assert runs[kid.id].state is RunState.SUCCEEDED and runs[kid.id].finished_at == T0 + 1
    last = {run_id: (await store.event_list(EventListParams(run_id)))[-1]
            for run_id in (ok.id, failed.id, retried.id, stale.id)}
    assert [(last[r.id].kind, last[r.id].seq) for r in (ok, failed, retried, stale)] == [
        ("succeeded", 3), ("failed", 3), ("retrying", 3), ("started", 2)]
    assert last[failed.id].data == {"why": 1}
    assert (await store.run_get(parent.id)).run_at == T0 + 1  # woken by its child's end


async def test_finishes_and_the_next_claim_are_written_together(store):
    """run_finish_claim: each end written (or refused) as run_finish_many would, and the
    claim made as run_claim would, in claim order and within its limit; a retry the
    finishes put back is not due yet, so no store can claim it here."""
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert(), insert(), insert()])
    ok, retried, stale = await store.run_claim(claim(wid, limit=3))
    low, high, other = insert(priority=5), insert(priority=0), insert()
    await store.run_insert_many([low, high, other])
    ends = [RunFinishParams(ok.id, ok.fence, RunState.SUCCEEDED, result='"ok"', now=T0 + 1, alone=True),
            RunFinishParams(retried.id, retried.fence, RunState.QUEUED, error='{"type": "R"}',
                            run_at=T0 + 60, now=T0 + 1, alone=True),
            RunFinishParams(stale.id, stale.fence + 1, RunState.SUCCEEDED, result="1", now=T0 + 1,
                            alone=True)]
    refused, claimed = await store.run_finish_claim(ends, claim(wid, limit=2, now=T0 + 1))
    assert refused == [stale.id]
    assert [run.key for run in claimed] == [high.key, other.key]  # priority, then submission
    assert all(run.state is RunState.RUNNING and run.owner == wid and run.fence == 1 for run in claimed)
    runs = {run.id: run for run in await store.run_get_many([ok.id, retried.id, stale.id])}
    assert runs[ok.id].state is RunState.SUCCEEDED and runs[ok.id].value() == "ok"
    assert runs[retried.id].state is RunState.QUEUED and runs[retried.id].run_at == T0 + 60
    assert runs[stale.id].state is RunState.RUNNING and runs[stale.id].result is None
    logs = {run.id: [(e.seq, e.kind) for e in await store.event_list(EventListParams(run.id))]
            for run in (ok, retried, *claimed)}
    assert logs[ok.id] == [(1, "submitted"), (2, "started"), (3, "succeeded")]
    assert logs[retried.id] == [(1, "submitted"), (2, "started"), (3, "retrying")]
    assert [logs[run.id] for run in claimed] == [[(1, "submitted"), (2, "started")]] * 2
    # What the claim left is claimed next, and a claim that finds nothing is no error.
    refused, claimed = await store.run_finish_claim([], claim(wid, limit=5, now=T0 + 2))
    assert refused == [] and [run.key for run in claimed] == [low.key]
    assert await store.run_finish_claim([], claim(wid, now=T0 + 2)) == ([], [])


async def test_finishes_that_set_off_more_are_written_with_a_claim_too(store):
    """A child's end (no `alone`) wakes its parent when written with a claim, as alone."""
    wid = await store.worker_register(worker())
    parent, child = await _parked_parent(store, wid)
    (child,) = await store.run_insert_many([child])
    (child,) = await store.run_claim(claim(wid, limit=1))
    waiting = insert()
    await store.run_insert_many([waiting])
    end = RunFinishParams(child.id, child.fence, RunState.SUCCEEDED, result="2", now=T0 + 1)
    refused, claimed = await store.run_finish_claim([end], claim(wid, limit=1, now=T0 + 1))
    assert refused == [] and [run.key for run in claimed] == [waiting.key]
    assert (await store.run_get(child.id)).state is RunState.SUCCEEDED
    assert (await store.run_get(parent.id)).run_at == T0 + 1  # woken by its child's end


async def test_a_finished_run_refuses_a_second_finish(store):
    _, run = await _claimed(store)
    ok = RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1", now=T0)
    assert await store.run_finish_many([ok]) == []
    again = RunFinishParams(run.id, run.fence, RunState.FAILED, error="{}", now=T0)
    assert await store.run_finish_many([again]) == [run.id]
    assert (await store.run_get(run.id)).state is RunState.SUCCEEDED


async def test_retry_requeues_at_backoff_for_the_next_attempt(store):
    wid, run = await _claimed(store)
    error = json.dumps({"type": "Boom", "message": "x"})
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.QUEUED, error=error,
                                                        run_at=T0 + 10, now=T0)]) == []
    stored = await store.run_get(run.id)
    # It waits out its backoff as the attempt it will run next (rules: the attempt a run is on).
    assert stored.state is RunState.QUEUED and stored.attempt == 2 and stored.run_at == T0 + 10
    assert stored.error_info()["type"] == "Boom"
    assert await store.run_claim(claim(wid, now=T0 + 9)) == []
    (again,) = await store.run_claim(claim(wid, now=T0 + 10))
    assert again.attempt == 2 and again.fence == 2


async def test_release_gives_the_run_back_without_using_an_attempt(store):
    wid, run = await _claimed(store)
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.QUEUED,
                                                        release=True, now=T0)]) == []
    stored = await store.run_get(run.id)
    # Still attempt 1: the next claim continues it.
    assert stored.state is RunState.QUEUED and stored.attempt == 1 and stored.owner is None
    (again,) = await store.run_claim(claim(wid))
    assert again.attempt == 1 and again.fence == 2


async def test_extend_renews_live_leases_and_reports_cancel_requests(store):
    wid, run = await _claimed(store, lease_s=5)
    result = await store.run_extend(RunExtendParams(wid, [(run.id, run.fence)], 20, now=T0 + 4))
    assert result.lost == [] and result.cancel_requested == []
    assert (await store.run_get(run.id)).lease_expires_at == T0 + 24
    # Renewed: not rescued at the old expiry.
    assert await store.run_rescue_many(RunRescueParams(now=T0 + 6, worker_stale_s=1e9)) == []
    await store.run_cancel(RunCancelParams(run.id, now=T0 + 7))
    result = await store.run_extend(RunExtendParams(wid, [(run.id, run.fence)], 20, now=T0 + 8))
    assert result.cancel_requested == [run.id]


async def test_rescue_of_an_expired_lease_requeues_without_using_the_attempt(store):
    _, run = await _claimed(store, lease_s=5)
    assert await store.run_rescue_many(RunRescueParams(now=T0 + 4, worker_stale_s=1e9)) == []
    (rescued,) = await store.run_rescue_many(RunRescueParams(now=T0 + 6, worker_stale_s=1e9))
    assert rescued.state is RunState.QUEUED and rescued.recoveries == 1 and rescued.attempt == 1
    assert rescued.owner is None and rescued.run_at == T0 + 6


async def test_rescue_takes_runs_of_a_deregistered_worker_at_once(store):
    wid, run = await _claimed(store, lease_s=300)
    await store.worker_deregister(wid)
    (rescued,) = await store.run_rescue_many(RunRescueParams(now=T0 + 1, worker_stale_s=1e9))
    assert rescued.id == run.id and rescued.state is RunState.QUEUED


async def test_a_run_rescued_too_often_goes_dead(store):
    wid, run = await _claimed(store, lease_s=1)
    now = T0
    for recovery in range(1, 4):
        now += 2
        (rescued,) = await store.run_rescue_many(RunRescueParams(max_recoveries=2, now=now,
                                                                 worker_stale_s=1e9))
        if recovery <= 2:
            assert rescued.state is RunState.QUEUED
            await store.run_claim(claim(wid, now=now, lease_s=1))
    assert rescued.state is RunState.DEAD and rescued.recoveries == 3
    assert rescued.error_info()["type"] == "WorkerLost"


async def test_cancel_a_queued_run_ends_it_and_it_is_never_claimed(store):
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([insert()])
    cancelled = await store.run_cancel(RunCancelParams(run.id, now=T0))
    assert cancelled.state is RunState.CANCELLED and cancelled.finished_at == T0
    assert await store.run_claim(claim(wid)) == []


async def test_cancel_a_running_run_flags_it_for_its_owner(store):
    _, run = await _claimed(store)
    flagged = await store.run_cancel(RunCancelParams(run.id, now=T0))
    assert flagged.state is RunState.RUNNING and flagged.cancel_requested
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.CANCELLED,
                                                        error="{}", now=T0)]) == []
    assert (await store.run_get(run.id)).state is RunState.CANCELLED


async def test_cancel_of_an_ended_or_unknown_run_is_a_clear_error(store):
    _, run = await _claimed(store)
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1", now=T0)])
    with pytest.raises(RunEnded, match="already ended succeeded"):
        await store.run_cancel(RunCancelParams(run.id))
    with pytest.raises(RunNotFound):
        await store.run_cancel(RunCancelParams(123456789))


async def test_retry_moves_a_dead_run_back_to_queued_with_fresh_attempts(store):
    wid, run = await _claimed(store, max_attempts=1)
    await store.run_finish_many([
        RunFinishParams(run.id, run.fence, RunState.DEAD, error='{"type":"X"}', now=T0)])
    retried = await store.run_retry(RunRetryParams(run.id, now=T0 + 5))
    assert retried.state is RunState.QUEUED and retried.attempt == 0 and retried.run_at == T0 + 5
    assert retried.error is None and retried.finished_at is None
    (again,) = await store.run_claim(claim(wid, now=T0 + 5))
    assert again.attempt == 1 and again.fence == run.fence + 1


async def test_retry_refuses_runs_that_are_not_dead_or_failed(store):
    _, running = await _claimed(store)
    (queued,) = await store.run_insert_many([insert()])
    with pytest.raises(RunNotRetryable):
        await store.run_retry(RunRetryParams(queued.id))
    with pytest.raises(RunNotRetryable, match="is running"):
        await store.run_retry(RunRetryParams(running.id))
    await store.run_finish_many([
        RunFinishParams(running.id, running.fence, RunState.SUCCEEDED, result="1", now=T0)])
    with pytest.raises(RunNotRetryable, match="already ended succeeded"):
        await store.run_retry(RunRetryParams(running.id))
    with pytest.raises(RunNotFound):
        await store.run_retry(RunRetryParams(999999))


def _child_of(run, key: str, fence: int | None = None):
    params = insert(key)
    params.parent_id, params.parent_fence = run.id, run.fence if fence is None else fence
    return params


async def _no_run_by_key(store, key: str) -> None:
    assert await store.run_list(RunListParams(key=key)) == [], f"a run {key} was made"


async def test_a_child_is_made_only_under_its_parents_current_fence(store):
    """A child submitted by its parent's attempt is fenced as that attempt's other writes:
    after a takeover the stale owner's child is refused and nothing is written; the new
    owner's (the same key, a replay) is made; one of a run that ended or was removed (a
    stale owner woken after its family was cancelled and reclaimed) is refused too."""
    _, run = await _claimed(store, lease_s=5)
    new_worker = await store.worker_register(worker())
    await store.run_rescue_many(RunRescueParams(now=T0 + 6, worker_stale_s=1e9))
    (retaken,) = await store.run_claim(claim(new_worker, now=T0 + 6))
    with pytest.raises(LeaseLost):
        await store.run_insert_many([_child_of(run, "zombie-child")])
    await _no_run_by_key(store, "zombie-child")
    threaded = _child_of(run, "zombie-thread-child")
    threaded.thread, threaded.on_busy = "zombie-thread", "enqueue"
    with pytest.raises(LeaseLost):
        await store.run_insert_threaded(threaded)
    await _no_run_by_key(store, "zombie-thread-child")
    # A batch with one stale child in it writes none of its runs.
    with pytest.raises(LeaseLost):
        await store.run_insert_many([insert("beside"), _child_of(run, "zombie-child")])
    await _no_run_by_key(store, "beside")
    (child,) = await store.run_insert_many([_child_of(retaken, "child")])
    assert child.parent_id == run.id and child.state is RunState.QUEUED
    (again,) = await store.run_insert_many([_child_of(retaken, "child")])
    assert again.id == child.id and again.existed

    assert await store.run_finish_many([RunFinishParams(run.id, retaken.fence, RunState.SUCCEEDED,
                                                        result='"ok"', now=T0 + 7)]) == []
    with pytest.raises(LeaseLost):
        await store.run_insert_many([_child_of(retaken, "after-the-end")])
    await _no_run_by_key(store, "after-the-end")
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))).run_ids == [run.id]
    with pytest.raises(LeaseLost):
        await store.run_insert_many([_child_of(retaken, "after-the-removal")])
    await _no_run_by_key(store, "after-the-removal")
