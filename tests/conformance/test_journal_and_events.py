"""The step journal, the event log and child runs, on every backend."""

from __future__ import annotations

import json

import pytest

from runwright.runs import RunState
from runwright.store._params import (
    EventAppendParams,
    EventListParams,
    RunCancelParams,
    RunExpireParams,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    RunRetryParams,
    StepRecordParams,
)

from .helpers import T0, claim, insert, step_record, worker


async def _claimed(store, **kw):
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([insert(**kw)])
    (claimed,) = await store.run_claim(claim(wid))
    return wid, claimed


def _kinds(events) -> list[str]:
    return [e.kind for e in events]


async def test_a_run_log_is_gapless_from_submission_to_its_end(store):
    wid, run = await _claimed(store)
    seqs = await store.event_append(EventAppendParams(run.id, run.fence, [
        ("progress", '{"pct":50}'), ("progress", '{"pct":90}')], now=T0))
    assert seqs == [3, 4]
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1", now=T0)])
    events = await store.event_list(EventListParams(run.id))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert _kinds(events) == ["submitted", "started", "progress", "progress", "succeeded"]
    assert events[1].data == {"attempt": 1, "worker": wid, "fence": 1}
    assert events[2].data == {"pct": 50} and events[4].terminal
    assert [e.seq for e in await store.event_list(EventListParams(run.id, after=3))] == [4, 5]
    assert (await store.run_get(run.id)).last_seq == 5


async def test_the_submitted_event_carries_awkward_text_as_it_was_given(store):
    """Event 1 names the run's task, key, queue, priority, parent and thread; text with
    quotes, backslashes, control characters and non-ASCII comes back as it went in,
    whether the run was inserted alone or in a batch (PostgreSQL: two statements)."""
    (parent,) = await store.run_insert_many([insert()])
    awkward = insert(key='k"\\ \x01 é\n', queue='q "line"\nnext')
    awkward.parent_id = parent.id
    alone_fresh = insert(key='f"\\ \x02 ü', queue='q\t"é"')  # PostgreSQL's INSERT_ONE
    alone_fresh.key_is_fresh = True
    (alone,) = await store.run_insert_many([awkward])
    batch = await store.run_insert_many([insert(key='b\\"'), insert(queue="é\t")])
    (fresh,) = await store.run_insert_many([alone_fresh])
    for run, parent_id in ((alone, parent.id), (batch[0], None), (batch[1], None), (fresh, None)):
        (first,) = await store.event_list(EventListParams(run.id, limit=1))
        assert first.kind == "submitted"
        assert first.data == {"task": "t", "key": run.key, "queue": run.queue, "priority": 2,
                              "parent": parent_id, "thread": None}
    assert alone.key == 'k"\\ \x01 é\n' and alone.queue == 'q "line"\nnext'


async def test_a_superseded_owner_cannot_append_events_or_journal_steps(store):
    _, run = await _claimed(store)
    new_worker = await store.worker_register(worker())
    await store.run_rescue_many(RunRescueParams(now=T0 + 3600, worker_stale_s=1e9))
    (retaken,) = await store.run_claim(claim(new_worker, now=T0 + 3600))
    assert await store.event_append(EventAppendParams(run.id, run.fence, [("zombie", "{}")])) is None
    assert not await step_record(store, StepRecordParams(run.id, run.fence, 0, "charge", "done", "1"))
    assert await store.step_list(run.id) == []
    assert _kinds(await store.event_list(EventListParams(run.id))) == [
        "submitted", "started", "recovered", "started"]
    assert await step_record(store, StepRecordParams(run.id, retaken.fence, 0, "charge", "done", "1"))
    logged = (await store.event_list(EventListParams(run.id)))[-1]
    assert (logged.kind, logged.data) == ("step", {"position": 0, "name": "charge", "status": "done"})


def _emit(run, mark: str, kind: str = "progress", data: str = '{"pct":50}', replayed: bool = False,
          fence: int | None = None) -> EventAppendParams:
    return EventAppendParams(run.id, run.fence if fence is None else fence, [(kind, data)], now=T0,
                             mark=mark, replayed=replayed)


async def test_an_emit_is_appended_once_by_its_mark_across_claims(store):
    """An emit (a mark: its place in the run's code) is part of the run's history: made
    again, under the same claim or a later one, replayed or not, it appends nothing and
    returns the seq it got first. Another place, or another kind at that place, is
    another event; a replayed emit never appends; a superseded claim is refused."""
    _, run = await _claimed(store)
    assert await store.event_append(_emit(run, "0.0")) == [3]
    assert await store.event_append(_emit(run, "0.0", data='{"pct":51}')) == [3]
    assert await store.event_append(_emit(run, "0.1")) == [4]
    assert await store.event_append(_emit(run, "0.0", kind="other")) == [5]
    assert await store.event_append(_emit(run, "1.0", replayed=True)) == []  # unknown: not appended
    new_worker = await store.worker_register(worker())
    await store.run_rescue_many(RunRescueParams(now=T0 + 3600, worker_stale_s=1e9))
    (retaken,) = await store.run_claim(claim(new_worker, now=T0 + 3600))
    assert await store.event_append(_emit(run, "0.1")) is None  # the old claim
    assert await store.event_append(_emit(run, "9.0", replayed=True)) is None
    assert await store.event_append(_emit(retaken, "0.1", replayed=True)) == [4]
    assert await store.event_append(_emit(retaken, "0.0")) == [3]
    assert await store.event_append(_emit(retaken, "1.0")) == [8]
    events = await store.event_list(EventListParams(run.id))
    assert _kinds(events) == ["submitted", "started", "progress", "progress", "other", "recovered",
                              "started", "progress"]
    assert events[2].data == {"pct": 50}
    assert (await store.run_get(run.id)).last_seq == 8


async def test_steps_are_journaled_once_per_position(store):
    _, run = await _claimed(store)
    assert await step_record(store, StepRecordParams(run.id, run.fence, 0, "fetch", "done", '"page"', now=T0))
    assert await step_record(store, StepRecordParams(run.id, run.fence, 1, "parse", "failed",
                                                    error='{"type":"X"}', now=T0))
    assert not await step_record(store, StepRecordParams(run.id, run.fence, 0, "fetch", "done", '"again"'))
    steps = await store.step_list(run.id)
    assert [(s.position, s.name, s.status) for s in steps] == [(0, "fetch", "done"), (1, "parse", "failed")]
    assert steps[0].value() == "page" and steps[0].fence == run.fence


async def test_retry_release_cancel_and_rescue_are_logged(store):
    wid, run = await _claimed(store)
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.QUEUED, error='{"type":"E"}',
                                                 event_data='{"attempt":1}', run_at=T0, now=T0)])
    (again,) = await store.run_claim(claim(wid))
    await store.run_finish_many([RunFinishParams(run.id, again.fence, RunState.QUEUED, release=True,
                                                 event_kind="parked", run_at=T0, now=T0)])
    await store.run_cancel(RunCancelParams(run.id, now=T0))
    assert _kinds(await store.event_list(EventListParams(run.id))) == [
        "submitted", "started", "retrying", "started", "parked", "cancelled"]


async def test_a_child_that_ends_wakes_its_parked_parent(store):
    wid, parent = await _claimed(store)
    (child,) = await store.run_insert_many([RunInsertParams(
        key="child", task="t", args="{}", parent_id=parent.id, now=T0)])
    assert child.parent_id == parent.id
    await store.run_finish_many([RunFinishParams(parent.id, parent.fence, RunState.QUEUED, release=True,
                                                 event_kind="parked", run_at=T0 + 3600, now=T0)])
    (claimed_child,) = await store.run_claim(claim(wid, now=T0 + 1))
    assert claimed_child.id == child.id  # the parent is parked, not due
    await store.run_finish_many([RunFinishParams(child.id, claimed_child.fence, RunState.SUCCEEDED,
                                                 result="7", now=T0 + 2)])
    woken = await store.run_get(parent.id)
    assert woken.state is RunState.QUEUED and woken.run_at <= T0 + 2 + 1


async def test_a_child_that_ends_before_its_parent_parks_is_not_missed(store):
    wid = await store.worker_register(worker())
    (parent,) = await store.run_insert_many([insert()])
    (parent,) = await store.run_claim(claim(wid, limit=1))
    await store.run_insert_many([RunInsertParams(key="c", task="t", args="{}", parent_id=parent.id, now=T0)])
    (child,) = await store.run_claim(claim(wid))
    await store.run_finish_many([
        RunFinishParams(child.id, child.fence, RunState.SUCCEEDED, result="1", now=T0)])
    # The parent parks only now, long after its child ended: it must come due at once.
    await store.run_finish_many([RunFinishParams(parent.id, parent.fence, RunState.QUEUED, release=True,
                                                 run_at=T0 + 3600, now=T0 + 5)])
    assert (await store.run_get(parent.id)).run_at == T0 + 5


async def test_cancel_reaches_open_descendants(store):
    wid, parent = await _claimed(store)
    (child,) = await store.run_insert_many([RunInsertParams(key="c1", task="t", args="{}",
                                                            parent_id=parent.id, now=T0)])
    (grandchild, done_child) = await store.run_insert_many([
        RunInsertParams(key="g1", task="other", args="{}", parent_id=child.id, now=T0),
        RunInsertParams(key="c2", task="t", args="{}", parent_id=parent.id, now=T0)])
    (running_child,) = await store.run_claim(claim(wid, limit=1))
    assert running_child.id == child.id
    (c2,) = await store.run_claim(claim(wid, limit=1))
    await store.run_finish_many([RunFinishParams(c2.id, c2.fence, RunState.SUCCEEDED, result="1", now=T0)])
    cancelled = await store.run_cancel(RunCancelParams(parent.id, now=T0))
    assert cancelled.cancel_requested and cancelled.state is RunState.RUNNING
    states = {r.id: (r.state, r.cancel_requested) for r in await store.run_get_many(
        [child.id, grandchild.id, done_child.id])}
    assert states == {child.id: (RunState.RUNNING, True), grandchild.id: (RunState.CANCELLED, False),
                      done_child.id: (RunState.SUCCEEDED, False)}
    assert json.loads((await store.run_get(grandchild.id)).error)["type"] == "Cancelled"


async def test_a_manual_retry_keeps_completed_steps_and_forgets_failed_ones(store):
    _, run = await _claimed(store)
    await step_record(store, StepRecordParams(run.id, run.fence, 0, "a", "done", "1", now=T0))
    await step_record(store, StepRecordParams(run.id, run.fence, 1, "b", "failed", error='{"type":"X"}'))
    await step_record(store, StepRecordParams(run.id, run.fence, 2, "c", "failed",
                                             error='{"type": "OutcomeUnknown", "message": "?"}'))
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.FAILED, error="{}", now=T0)])
    await store.run_retry(RunRetryParams(run.id, now=T0))
    # An unknown outcome of an at-most-once call stays: that call is never made again.
    assert [(s.position, s.status) for s in await store.step_list(run.id)] == [(0, "done"), (2, "failed")]


async def test_a_started_mark_is_completed_once_and_never_restarted(store):
    _, run = await _claimed(store)
    started = StepRecordParams(run.id, run.fence, 0, "tool:pay", "started", now=T0)
    assert await step_record(store, started)
    assert await step_record(store, started)  # the same mark re-sent (a lost reply): idempotent
    assert await step_record(store, StepRecordParams(run.id, run.fence, 0, "tool:pay", "done", '"ok"'))
    assert not await step_record(store, StepRecordParams(run.id, run.fence, 0, "tool:pay", "done", '"x"'))
    assert not await step_record(store, started)  # an outcome is never reopened
    (step,) = await store.step_list(run.id)
    assert (step.status, step.value()) == ("done", "ok")


async def test_deadlines_end_open_runs_failed_whatever_their_worker(store):
    wid = await store.worker_register(worker())
    late_running, late_queued, in_time = await store.run_insert_many([
        RunInsertParams(key="a", task="t", args="{}", deadline_at=T0 + 10, now=T0),
        RunInsertParams(key="b", task="other", args="{}", deadline_at=T0 + 10, now=T0),
        RunInsertParams(key="c", task="t", args="{}", deadline_at=T0 + 100, now=T0)])
    (running,) = await store.run_claim(claim(wid, limit=1))
    assert running.id == late_running.id
    assert await store.run_expire_many(RunExpireParams(now=T0 + 5)) == []
    expired = await store.run_expire_many(RunExpireParams(now=T0 + 11))
    assert sorted(r.id for r in expired) == [late_running.id, late_queued.id]
    assert all(r.state is RunState.FAILED and r.error_info()["type"] == "DeadlineExceeded" for r in expired)
    # The expired run's worker cannot finish it any more.
    assert await store.run_finish_many([RunFinishParams(running.id, running.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 12)]) == [running.id]
    assert (await store.run_get(in_time.id)).state is RunState.QUEUED
    assert (await store.event_list(EventListParams(late_queued.id)))[-1].kind == "failed"


async def test_a_journal_write_seen_again_is_a_success_and_logs_once(store):
    """A retry after a lost reply re-sends a write that already committed."""
    _, run = await _claimed(store)
    write = StepRecordParams(run.id, run.fence, 0, "fetch", "done", '"page"', now=T0)
    assert await step_record(store, write)
    assert await step_record(store, write)  # the same write again: ours, so a success
    assert not await step_record(store, StepRecordParams(run.id, run.fence, 0, "other", "done", "1"))
    assert [e.kind for e in await store.event_list(EventListParams(run.id))].count("step") == 1


async def test_the_steps_of_several_runs_are_journaled_in_one_write_each_judged_alone(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert(), insert(), insert()])
    a, b, c = sorted(await store.run_claim(claim(wid)), key=lambda r: r.id)
    assert await step_record(store, StepRecordParams(b.id, b.fence, 0, "fetch", "done", '"first"', now=T0))
    answers = await store.step_record_many([
        StepRecordParams(c.id, c.fence, 0, "fetch", "done", '"c"', now=T0),
        StepRecordParams(a.id, a.fence + 1, 0, "fetch", "done", '"zombie"', now=T0),  # not its claim
        StepRecordParams(b.id, b.fence, 0, "fetch", "done", '"again"', now=T0),  # position taken
    ])
    assert answers == [True, False, False]
    # c's write sent again (its reply lost) is ours: a success, logged once.
    assert await store.step_record_many([StepRecordParams(c.id, c.fence, 0, "fetch", "done", '"c"',
                                                          now=T0)]) == [True]
    assert [s.value() for s in await store.step_list(c.id)] == ["c"]
    assert await store.step_list(a.id) == []
    assert [s.value() for s in await store.step_list(b.id)] == ["first"]
    logs = {run.id: await store.event_list(EventListParams(run.id)) for run in (a, b, c)}
    assert {run_id: [e.seq for e in events] for run_id, events in logs.items()} == {
        a.id: [1, 2], b.id: [1, 2, 3], c.id: [1, 2, 3]}, "gapless, a step logged once, nothing refused"
    assert _kinds(logs[c.id])[-1] == "step" and _kinds(logs[a.id]) == ["submitted", "started"]
    assert await store.step_record_many([]) == []


async def test_a_journal_batch_holds_one_step_per_run(store):
    _, run = await _claimed(store)
    with pytest.raises(ValueError, match="one step per run"):
        await store.step_record_many([StepRecordParams(run.id, run.fence, 0, "a", "done", "1"),
                                      StepRecordParams(run.id, run.fence, 1, "b", "done", "2")])
    assert await store.step_list(run.id) == []


async def test_a_run_past_its_deadline_is_never_claimed(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([RunInsertParams(key="late", task="t", args="{}",
                                                 deadline_at=T0 + 1, now=T0)])
    assert await store.run_claim(claim(wid, now=T0 + 2)) == []
    (expired,) = await store.run_expire_many(RunExpireParams(now=T0 + 2))
    assert expired.state is RunState.FAILED


async def test_a_cancel_requested_as_the_run_parks_ends_it_cancelled(store):
    _, run = await _claimed(store)
    await store.run_cancel(RunCancelParams(run.id, now=T0))  # it is running: only flagged
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.QUEUED, release=True,
                                                 event_kind="parked", run_at=T0 + 3600, now=T0)])
    ended = await store.run_get(run.id)
    assert ended.state is RunState.CANCELLED and ended.error_info()["type"] == "Cancelled"
    assert _kinds(await store.event_list(EventListParams(run.id)))[-2:] == ["cancel_requested", "cancelled"]
