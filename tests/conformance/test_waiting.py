"""What a queued run waits on, as every store keeps it: the fenced end of the attempt that
gave its slot back records it (a park's reason, a retry's backoff), lists filter by it
while the run is not yet due, and any other end clears it."""

from __future__ import annotations

import json

import pytest

from runwright.runs import RunState, WaitReason
from runwright.store._params import RunFinishParams, RunInsertParams, RunListParams

from .helpers import T0, claim, insert, worker


def park(run, until: float, waits_on: WaitReason, now: float = T0) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, RunState.QUEUED, release=True, run_at=until,
                           event_kind="parked", waiting=waits_on, now=now,
                           event_data=json.dumps({"until": until, "reason": waits_on.value}))


def listed(store, waiting: WaitReason | None = None, due: bool = False, now: float = T0):
    return store.run_list(RunListParams(waiting=waiting, due=due, now=now))


async def ids(runs) -> set[int]:
    return {run.id for run in await runs}


async def test_each_park_and_a_retry_are_kept_and_listed_by_what_they_wait_on(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([insert() for _ in range(5)])
    claimed = {run.id: run for run in await store.run_claim(claim(wid, limit=5))}
    sleeping, asking, parent, limited, failing = (claimed[run.id] for run in runs)
    refused = await store.run_finish_many([
        park(sleeping, T0 + 3600, WaitReason.SLEEP),
        park(asking, T0 + 60, WaitReason.ANSWER),
        park(parent, T0 + 30, WaitReason.CHILDREN),
        park(limited, T0 + 5, WaitReason.RATE_LIMIT),
        RunFinishParams(failing.id, failing.fence, RunState.QUEUED, error='{"type": "E"}',
                        run_at=T0 + 10, waiting=WaitReason.RETRY, now=T0)])
    assert refused == []
    expected = {sleeping.id: "sleep", asking.id: "answer", parent.id: "children",
                limited.id: "rate_limit", failing.id: "retry"}
    assert {run.id: run.waiting for run in await store.run_get_many(list(expected))} == expected
    for run_id, reason in expected.items():
        assert await ids(listed(store, WaitReason(reason))) == {run_id}, reason
    assert await ids(listed(store, WaitReason.SCHEDULED)) == set()
    assert await ids(listed(store, due=True)) == set()
    # Each reason holds until its run is due: then the run waits on the world, not on
    # time, and is listed as due (the limited one at T0 + 5, the failing one at T0 + 10).
    assert await ids(listed(store, WaitReason.RATE_LIMIT, now=T0 + 5)) == set()
    assert await ids(listed(store, due=True, now=T0 + 10)) == {limited.id, failing.id}
    assert await ids(listed(store, WaitReason.SLEEP, now=T0 + 10)) == {sleeping.id}


async def test_a_run_submitted_for_later_is_scheduled_and_filters_combine(store):
    later, now_due = await store.run_insert_many([insert(run_at=T0 + 60, task="a"), insert(task="b")])
    assert (await store.run_get(later.id)).waiting is None
    assert await ids(listed(store, WaitReason.SCHEDULED)) == {later.id}
    assert await ids(listed(store, due=True)) == {now_due.id}
    assert await ids(store.run_list(RunListParams(waiting=WaitReason.SCHEDULED, task="b", now=T0))) == set()
    # A state filter that is not queued and a waiting filter never both hold.
    assert await store.run_list(RunListParams(states=[RunState.SUCCEEDED], waiting=WaitReason.SCHEDULED,
                                              now=T0)) == []


async def test_a_claim_and_any_other_end_leave_no_reason_to_list(store):
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([insert()])
    (first,) = await store.run_claim(claim(wid))
    assert await store.run_finish_many([park(first, T0 + 1, WaitReason.SLEEP)]) == []
    (second,) = await store.run_claim(claim(wid, now=T0 + 1))
    # Claimed: running, so no list of waiting runs shows it, whatever it waited on before.
    assert await ids(listed(store, WaitReason.SLEEP, now=T0)) == set()
    # Given back untouched (a graceful stop): nothing recorded, due at once.
    assert await store.run_finish_many([RunFinishParams(second.id, second.fence, RunState.QUEUED,
                                                        release=True, now=T0 + 1)]) == []
    assert (await store.run_get(run.id)).waiting is None
    (third,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert await store.run_finish_many([RunFinishParams(third.id, third.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 2)]) == []
    ended = await store.run_get(run.id)
    assert ended.state is RunState.SUCCEEDED and ended.waiting is None


async def test_a_child_that_ends_makes_its_parked_parent_due_and_no_longer_waiting(store):
    wid = await store.worker_register(worker())
    (parent,) = await store.run_insert_many([insert()])
    (running,) = await store.run_claim(claim(wid))
    (child,) = await store.run_insert_many([RunInsertParams(
        key="child", task="t", args="{}", queue="default", priority=2, max_attempts=1,
        parent_id=parent.id, parent_fence=running.fence, now=T0)])
    assert await store.run_finish_many([park(running, T0 + 300, WaitReason.CHILDREN)]) == []
    assert await ids(listed(store, WaitReason.CHILDREN)) == {parent.id}
    (child_claimed,) = await store.run_claim(claim(wid, now=T0 + 1))
    assert child_claimed.id == child.id
    assert await store.run_finish_many([RunFinishParams(child.id, child_claimed.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 1)]) == []
    assert await ids(listed(store, WaitReason.CHILDREN, now=T0 + 2)) == set()
    assert await ids(listed(store, due=True, now=T0 + 2)) == {parent.id}


@pytest.mark.parametrize("reason", [WaitReason.WORKER, WaitReason.THREAD, WaitReason.SLOT,
                                    WaitReason.VERSION])
async def test_what_only_the_world_can_tell_is_not_asked_of_a_store(store, reason):
    from runwright.errors import InvalidInput

    with pytest.raises(InvalidInput, match="not kept by a store"):
        await store.run_list(RunListParams(waiting=reason, now=T0))


async def test_a_park_after_its_child_ended_comes_due_at_once_and_is_not_listed_as_waiting(store):
    """The child's end and the parent's park race: the child ends first (its wake lands on
    a running parent), then the parent parks on it. The park comes due at once, so no
    list shows it waiting for children it no longer waits for."""
    wid = await store.worker_register(worker())
    (parent,) = await store.run_insert_many([insert()])
    (running,) = await store.run_claim(claim(wid))
    (child,) = await store.run_insert_many([RunInsertParams(
        key="early-child", task="t", args="{}", queue="default", priority=2, max_attempts=1,
        parent_id=parent.id, parent_fence=running.fence, now=T0)])
    (child_claimed,) = await store.run_claim(claim(wid, now=T0 + 1))
    assert await store.run_finish_many([RunFinishParams(child.id, child_claimed.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 1)]) == []
    assert await store.run_finish_many([park(running, T0 + 300, WaitReason.CHILDREN, now=T0 + 2)]) == []
    assert await ids(listed(store, WaitReason.CHILDREN, now=T0 + 2)) == set()
    assert await ids(listed(store, due=True, now=T0 + 2)) == {parent.id}
