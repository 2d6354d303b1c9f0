"""Pause and resume (rules.plan_pause, plan_resume) on every backend, in each state a run
can be paused in: queued (not started), running, parked on a timer, waiting on a person,
waiting on its children; and what a pause does to the clocks, wakes, ends and takeovers
that meet it."""

from __future__ import annotations

import json

import pytest

from runwright.errors import RunEnded, RunNotPaused
from runwright.runs import PAUSED_RUN_AT, RunState, WaitReason
from runwright.store._params import (
    EventListParams,
    QuestionAnswerParams,
    QuestionOpenParams,
    RunCancelParams,
    RunExpireParams,
    RunFinishParams,
    RunListParams,
    RunNextDueParams,
    RunPauseParams,
    RunRescueParams,
    RunResumeParams,
)

from .helpers import T0, claim, insert, worker

PAUSED = WaitReason.PAUSED.value


async def kinds(store, run_id: int, after: int = 0) -> list[str]:
    return [e.kind for e in await store.event_list(EventListParams(run_id, after, 100))]


async def claimable(store, wid: int, now: float, tasks=("t",)) -> list[int]:
    """The ids a claim at `now` takes (and gives back at once, fenced: nothing stays claimed)."""
    runs = await store.run_claim(claim(wid, now=now, tasks=tasks))
    if runs:
        assert await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.QUEUED, release=True,
                                                            run_at=now + 1000, now=now) for r in runs]) == []
    return [r.id for r in runs]


def assert_paused(run) -> None:
    assert run.state is RunState.QUEUED and run.paused and run.waiting == PAUSED
    assert run.run_at == PAUSED_RUN_AT and not run.pause_requested


async def running(store, wid: int, **kw):
    (run,) = await store.run_insert_many([insert(**kw)])
    (claimed,) = await store.run_claim(claim(wid, tasks=(kw.get("task", "t"),)))
    assert claimed.id == run.id
    return claimed


async def parked(store, wid: int, waiting: WaitReason, until: float, **kw):
    run = await running(store, wid, **kw)
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=True, run_at=until, event_kind="parked",
        waiting=waiting, now=T0)]) == []
    return await store.run_get(run.id)


async def test_a_queued_run_is_held_until_resumed_and_keeps_its_submitted_time(store):
    wid = await store.worker_register(worker())
    (now_run, later) = await store.run_insert_many([insert(), insert(run_at=T0 + 100)])
    first = None
    for run in (now_run, later):
        paused = await store.run_pause(RunPauseParams(run.id, now=T0, by="ops"))
        assert_paused(paused)
        assert paused.attempt == 0 and paused.started_at is None
        first = first or paused
    # Pausing again changes nothing: no second event.
    again = await store.run_pause(RunPauseParams(now_run.id, now=T0 + 1))
    assert again == first
    assert await kinds(store, now_run.id) == ["submitted", "paused"]
    events = await store.event_list(EventListParams(now_run.id, 1, 10))
    assert events[0].data == {"by": "ops", "waited": None}
    # Not claimed, not counted as due, not a reason for a worker to wake.
    assert await claimable(store, wid, T0 + 10_000) == []
    next_due = await store.run_next_due_at(RunNextDueParams(["default"], ["t"]))
    assert next_due is None or next_due >= PAUSED_RUN_AT
    listed = await store.run_list(RunListParams(waiting=WaitReason.PAUSED, now=T0 + 1))
    assert sorted(r.id for r in listed) == sorted([now_run.id, later.id])
    # A resume: the one submitted for now is due now; the one submitted for later at its time.
    resumed = await store.run_resume(RunResumeParams(now_run.id, now=T0 + 5, by="ops"))
    assert resumed.state is RunState.QUEUED and not resumed.paused and resumed.waiting is None
    assert resumed.run_at == T0 + 5
    assert (await store.run_resume(RunResumeParams(later.id, now=T0 + 5))).run_at == T0 + 100
    assert (await kinds(store, now_run.id))[-1] == "resumed"
    assert await claimable(store, wid, T0 + 6) == [now_run.id]
    assert await claimable(store, wid, T0 + 100) == [later.id]


async def test_a_running_run_is_asked_and_pauses_at_the_end_of_its_attempt(store):
    wid = await store.worker_register(worker())
    run = await running(store, wid)
    asked = await store.run_pause(RunPauseParams(run.id, now=T0, by="ops"))
    assert asked.state is RunState.RUNNING and asked.pause_requested and asked.fence == run.fence
    assert (await store.run_pause(RunPauseParams(run.id, now=T0))).last_seq == asked.last_seq
    # Its owner stops at its next step boundary and gives the slot back, held.
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=True, run_at=PAUSED_RUN_AT, waiting=PAUSED,
        event_kind="paused", now=T0 + 1)]) == []
    paused = await store.run_get(run.id)
    assert_paused(paused)
    assert paused.attempt == run.attempt and paused.owner is None
    assert await kinds(store, run.id) == ["submitted", "started", "pause_requested", "paused"]
    assert await claimable(store, wid, T0 + 10_000) == []
    resumed = await store.run_resume(RunResumeParams(run.id, now=T0 + 2))
    assert resumed.run_at == T0 + 2 and resumed.attempt == 0
    (again,) = await store.run_claim(claim(wid, now=T0 + 3))
    assert again.id == run.id and again.fence == run.fence + 1 and again.attempt == 1
    assert not again.pause_requested


@pytest.mark.parametrize("waiting", [WaitReason.SLEEP, WaitReason.RETRY, WaitReason.CHILDREN], ids=str)
async def test_a_requeue_that_meets_a_pause_request_pauses(store, waiting: WaitReason):
    """A park (or a retry's backoff) on its way when the pause was asked: held, not lost."""
    wid = await store.worker_register(worker())
    run = await running(store, wid)
    await store.run_pause(RunPauseParams(run.id, now=T0))
    release = waiting is not WaitReason.RETRY
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=release, run_at=T0 + 5, waiting=waiting,
        event_kind="parked" if release else None, error=None if release else '{"type": "E"}',
        now=T0 + 1)]) == []
    paused = await store.run_get(run.id)
    assert_paused(paused)
    assert (await kinds(store, run.id))[-1] == "paused"
    assert await claimable(store, wid, T0 + 10) == []
    resumed = await store.run_resume(RunResumeParams(run.id, now=T0 + 20))
    assert resumed.run_at == T0 + 20 and resumed.attempt == 0


@pytest.mark.parametrize("end", [RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD], ids=str)
async def test_an_end_that_meets_a_pause_request_ends_the_run(store, end: RunState):
    wid = await store.worker_register(worker())
    run = await running(store, wid)
    await store.run_pause(RunPauseParams(run.id, now=T0))
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, end, result="1",
                                                        error='{"type": "E"}', now=T0 + 1)]) == []
    ended = await store.run_get(run.id)
    assert ended.state is end and not ended.pause_requested
    with pytest.raises(RunEnded):
        await store.run_pause(RunPauseParams(run.id, now=T0 + 2))
    with pytest.raises(RunEnded):
        await store.run_resume(RunResumeParams(run.id, now=T0 + 2))


async def test_a_resume_before_the_boundary_withdraws_the_request(store):
    wid = await store.worker_register(worker())
    run = await running(store, wid)
    await store.run_pause(RunPauseParams(run.id, now=T0))
    withdrawn = await store.run_resume(RunResumeParams(run.id, now=T0 + 1))
    assert withdrawn.state is RunState.RUNNING and not withdrawn.pause_requested
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=True, run_at=T0 + 5, waiting="sleep",
        event_kind="parked", now=T0 + 2)]) == []
    parked_run = await store.run_get(run.id)
    assert parked_run.waiting == "sleep" and parked_run.run_at == T0 + 5
    with pytest.raises(RunNotPaused, match="is queued and not paused"):
        await store.run_resume(RunResumeParams(run.id, now=T0 + 3))


async def test_a_sleeping_run_is_held_past_its_timer_until_resumed(store):
    """The timer keeps running; the wake is held until the resume."""
    wid = await store.worker_register(worker())
    run = await parked(store, wid, WaitReason.SLEEP, T0 + 60)
    assert_paused(await store.run_pause(RunPauseParams(run.id, now=T0 + 1)))
    assert await claimable(store, wid, T0 + 3600) == []
    resumed = await store.run_resume(RunResumeParams(run.id, now=T0 + 3600))
    assert resumed.run_at == T0 + 3600 and resumed.waiting is None
    assert await claimable(store, wid, T0 + 3600) == [run.id]


async def test_a_run_waiting_on_a_person_is_not_woken_by_the_answer_while_paused(store):
    wid = await store.worker_register(worker())
    run = await running(store, wid)
    body = json.dumps({"text": "Ship it?", "schema": {"type": "boolean"}})
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body, now=T0))
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=True, run_at=T0 + 300, waiting="answer",
        event_kind="parked", now=T0)]) == []
    assert_paused(await store.run_pause(RunPauseParams(run.id, now=T0 + 1)))
    await store.question_answer(QuestionAnswerParams(run.id, 0, "true", "ana", now=T0 + 2))
    assert_paused(await store.run_get(run.id))
    assert await claimable(store, wid, T0 + 10_000) == []
    assert (await store.run_resume(RunResumeParams(run.id, now=T0 + 3))).run_at == T0 + 3
    assert await claimable(store, wid, T0 + 3) == [run.id]


async def test_a_run_waiting_on_its_children_is_not_woken_by_their_end_while_paused(store):
    wid = await store.worker_register(worker())
    parent = await running(store, wid)
    child = insert(task="child")
    child.parent_id, child.parent_fence = parent.id, parent.fence
    (child,) = await store.run_insert_many([child])
    assert await store.run_finish_many([RunFinishParams(
        parent.id, parent.fence, RunState.QUEUED, release=True, run_at=T0 + 300, waiting="children",
        event_kind="parked", now=T0)]) == []
    assert_paused(await store.run_pause(RunPauseParams(parent.id, now=T0 + 1)))
    (claimed,) = await store.run_claim(claim(wid, now=T0 + 2, tasks=("child",)))
    assert await store.run_finish_many([RunFinishParams(claimed.id, claimed.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 2)]) == []
    assert_paused(await store.run_get(parent.id))
    assert await claimable(store, wid, T0 + 10_000) == []
    await store.run_resume(RunResumeParams(parent.id, now=T0 + 3))
    assert await claimable(store, wid, T0 + 3) == [parent.id]


async def test_a_paused_run_can_be_cancelled_and_its_deadline_keeps_running(store):
    wid = await store.worker_register(worker())
    (doomed, cancelled) = await store.run_insert_many([insert(), insert()])
    await store.run_pause(RunPauseParams(doomed.id, now=T0))
    await store.run_pause(RunPauseParams(cancelled.id, now=T0))
    assert (await store.run_cancel(RunCancelParams(cancelled.id, now=T0 + 1))).state is RunState.CANCELLED
    with pytest.raises(RunEnded):
        await store.run_resume(RunResumeParams(cancelled.id, now=T0 + 2))
    # A deadline: the store's sweep ends a paused run whose deadline passed.
    late = insert()
    late.deadline_at = T0 + 10
    (late,) = await store.run_insert_many([late])
    await store.run_pause(RunPauseParams(late.id, now=T0))
    expired = await store.run_expire_many(RunExpireParams(now=T0 + 11))
    assert [r.id for r in expired] == [late.id]
    assert (await store.run_get(late.id)).state is RunState.FAILED
    assert (await store.run_get(doomed.id)).paused
    assert wid


async def test_a_run_whose_owner_died_while_asked_to_pause_is_taken_back_paused(store):
    wid = await store.worker_register(worker())
    run = await running(store, wid)
    await store.run_pause(RunPauseParams(run.id, now=T0))
    rescued = await store.run_rescue_many(RunRescueParams(now=T0 + 31))  # its lease ran out
    assert [r.id for r in rescued] == [run.id]
    assert_paused(await store.run_get(run.id))
    assert await claimable(store, wid, T0 + 100) == []


async def test_a_resume_of_a_run_that_is_not_paused_is_refused(store):
    wid = await store.worker_register(worker())
    (queued,) = await store.run_insert_many([insert(task="other")])
    with pytest.raises(RunNotPaused, match="only a paused run can be resumed"):
        await store.run_resume(RunResumeParams(queued.id, now=T0))
    run = await running(store, wid)
    with pytest.raises(RunNotPaused, match="is running and not paused"):
        await store.run_resume(RunResumeParams(run.id, now=T0))
    before = await store.run_get(queued.id)
    assert before.last_seq == 1 and not before.paused
