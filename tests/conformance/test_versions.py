"""Store scenarios for upgrades and heterogeneous pools: runs record the submitting app's
version, a claim takes only the majors its tasks can run, and runs that no live worker can
run are counted and, once due long enough, closed `failed`. Each runs on every backend."""

from __future__ import annotations

import json

from runwright.runs import RunState
from runwright.store._params import (
    EventListParams,
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
    RunNextDueParams,
    RunUnrunnableParams,
    WorkerRegisterParams,
)

from .helpers import T0, insert


def versioned(version: str | None, task: str = "t", queue: str = "default", priority: int = 2,
              run_at: float | None = None, tenant: str | None = None) -> RunInsertParams:
    params = insert(task=task, queue=queue, priority=priority, run_at=run_at)
    params.version, params.tenant = version, tenant
    return params


def worker_of(majors: dict[str, list[int]] | None, version: str = "2.0.0",
              queues: tuple[str, ...] = ("default",)) -> WorkerRegisterParams:
    tasks = sorted(majors or {"t": []})
    return WorkerRegisterParams(host="test-host", pid=1, queues=list(queues), tasks=tasks, now=T0,
                                version=version, majors=majors)


def claim_as(worker_id: int, majors: dict[str, list[int]] | None, limit: int = 10,
             now: float = T0) -> RunClaimParams:
    return RunClaimParams(worker_id, ["default"], sorted(majors or {"t": []}), limit, 30.0, now=now,
                          majors=majors)


async def test_a_run_records_the_version_that_submitted_it(store):
    new, old, unrecorded = await store.run_insert_many(
        [versioned("2.4.0"), versioned("1.9.3-rc.1"), versioned(None)])
    assert [r.version for r in await store.run_get_many([new.id, old.id, unrecorded.id])] == [
        "2.4.0", "1.9.3-rc.1", None]
    assert (await store.run_get(new.id)).version == "2.4.0"


async def test_a_claim_takes_only_runs_of_majors_its_tasks_can_run(store):
    wid = await store.worker_register(worker_of({"t": [2]}))
    old, new, unrecorded, newer = await store.run_insert_many(
        [versioned("1.0.0"), versioned("2.1.0"), versioned(None), versioned("3.0.0")])
    claimed = await store.run_claim(claim_as(wid, {"t": [2]}))
    # A run that recorded no version (submitted before runs did) is any major's.
    assert [r.id for r in claimed] == [new.id, unrecorded.id]
    assert await store.run_claim(claim_as(wid, {"t": [2]})) == []
    assert {r.id: r.state for r in await store.run_get_many([old.id, newer.id])} == {
        old.id: RunState.QUEUED, newer.id: RunState.QUEUED}
    # A task declared for majors 1-2 (versions="1-2") takes the old run too, not the newer.
    assert [r.id for r in await store.run_claim(claim_as(wid, {"t": [1, 2]}))] == [old.id]


async def test_majors_are_per_task(store):
    wid = await store.worker_register(worker_of({"a": [1, 2], "b": [2]}))
    a_old, b_old, b_new = await store.run_insert_many(
        [versioned("1.0.0", task="a"), versioned("1.0.0", task="b"), versioned("2.0.0", task="b")])
    claimed = await store.run_claim(claim_as(wid, {"a": [1, 2], "b": [2]}))
    assert [r.id for r in claimed] == [a_old.id, b_new.id]
    assert (await store.run_get(b_old.id)).state is RunState.QUEUED


async def test_claim_order_across_majors_is_priority_due_time_then_submission(store):
    wid = await store.worker_register(worker_of({"t": [1, 2]}))
    runs = await store.run_insert_many([
        versioned("2.0.0", priority=3), versioned("1.0.0", priority=2, run_at=T0 - 5),
        versioned("2.0.0", priority=2, run_at=T0 - 5), versioned("1.0.0", priority=0),
        versioned(None, priority=2, run_at=T0 - 9), versioned("9.0.0", priority=0)])
    claimed = await store.run_claim(claim_as(wid, {"t": [1, 2]}))
    assert [r.id for r in claimed] == [runs[3].id, runs[4].id, runs[1].id, runs[2].id, runs[0].id]


async def test_next_due_sees_only_runs_the_worker_could_claim(store):
    await store.run_insert_many([versioned("1.0.0", run_at=T0 - 10), versioned("2.0.0", run_at=T0 + 5)])
    assert await store.run_next_due_at(RunNextDueParams(["default"], ["t"], {"t": [2]})) == T0 + 5
    assert await store.run_next_due_at(RunNextDueParams(["default"], ["t"], {"t": [1, 2]})) == T0 - 10
    assert await store.run_next_due_at(RunNextDueParams(["default"], ["t"])) == T0 - 10


async def test_a_worker_registers_its_version_and_the_majors_of_its_tasks(store):
    wid = await store.worker_register(worker_of({"t": [1, 2], "u": [2]}, version="2.4.0"))
    (found,) = [w for w in await store.worker_list() if w.id == wid]
    assert found.version == "2.4.0" and found.majors == {"t": [1, 2], "u": [2]}


async def test_runs_no_live_worker_can_run_are_counted_by_queue_task_and_major(store):
    await store.worker_register(worker_of({"t": [2]}))
    await store.run_insert_many([
        versioned("1.0.0"), versioned("1.2.0"), versioned("2.0.0"), versioned(None),
        versioned("2.0.0", task="gpu"), versioned("2.0.0", queue="nobody"),
        versioned("1.0.0", run_at=T0 + 60)])  # not due yet: not counted
    kinds = await store.run_count_unrunnable(RunUnrunnableParams(now=T0))
    assert sorted(kinds, key=repr) == sorted([("default", "t", 1, 2), ("default", "gpu", 2, 1),
                                              ("nobody", "t", 2, 1)], key=repr)
    # Due for at least 30 s: none yet.
    assert await store.run_count_unrunnable(RunUnrunnableParams(due_for_s=30, now=T0)) == []


async def test_a_worker_of_the_old_major_makes_its_runs_runnable(store):
    await store.worker_register(worker_of({"t": [2]}))
    await store.run_insert_many([versioned("1.0.0")])
    assert await store.run_count_unrunnable(RunUnrunnableParams(now=T0)) == [("default", "t", 1, 1)]
    await store.worker_register(worker_of({"t": [1]}, version="1.5.0"))
    assert await store.run_count_unrunnable(RunUnrunnableParams(now=T0)) == []


async def test_unrunnable_runs_are_closed_failed_once_due_long_enough(store):
    wid = await store.worker_register(worker_of({"t": [2]}))
    early, late, runnable, other = await store.run_insert_many([
        versioned("1.0.0", run_at=T0 - 100), versioned("1.0.0", run_at=T0 - 10),
        versioned("2.0.0", run_at=T0 - 100), versioned("2.0.0", task="gpu", run_at=T0 - 100)])
    closed = await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=60, now=T0))
    assert sorted(r.id for r in closed) == sorted([early.id, other.id])
    for run in await store.run_get_many([early.id, other.id]):
        assert run.state is RunState.FAILED and run.finished_at == T0
        error = run.error_info()
        assert error["type"] == "Unrunnable" and "no live worker" in error["message"]
        events = await store.event_list(EventListParams(run.id))
        assert [e.kind for e in events] == ["submitted", "failed"]
        assert events[-1].data == {"error": "Unrunnable"}
    assert (await store.run_get(early.id)).error_info()["major"] == 1
    assert {r.id: r.state for r in await store.run_get_many([late.id, runnable.id])} == {
        late.id: RunState.QUEUED, runnable.id: RunState.QUEUED}
    # Nothing closes twice; the runnable run is still claimed as before.
    assert await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=60, now=T0)) == []
    assert [r.id for r in await store.run_claim(claim_as(wid, {"t": [2]}))] == [runnable.id]
    # Later, the other old run has been due long enough too.
    closed = await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=60, now=T0 + 60))
    assert [r.id for r in closed] == [late.id]


async def test_a_worker_registered_without_majors_runs_any_major(store):
    await store.worker_register(worker_of(None))
    await store.run_insert_many([versioned("1.0.0", run_at=T0 - 100)])
    assert await store.run_count_unrunnable(RunUnrunnableParams(now=T0)) == []
    assert await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=60, now=T0)) == []


async def test_a_tenants_count_of_unrunnable_runs_is_its_own(store):
    await store.worker_register(worker_of({"t": [2]}))
    await store.run_insert_many([versioned("1.0.0", tenant="a"), versioned("1.0.0", tenant="a"),
                                 versioned("1.0.0", tenant="b")])
    assert await store.run_count_unrunnable(RunUnrunnableParams(now=T0, tenant="a")) == [
        ("default", "t", 1, 2)]
    assert await store.run_count_unrunnable(RunUnrunnableParams(now=T0, tenant="c")) == []
    closed = await store.run_fail_unrunnable_many(RunUnrunnableParams(now=T0 + 1, tenant="a"))
    assert len(closed) == 3  # a close takes every tenant's


async def test_closing_an_unrunnable_child_wakes_its_parked_parent(store):
    wid = await store.worker_register(worker_of({"t": [2]}))
    (parent,) = await store.run_insert_many([versioned("2.0.0")])
    (claimed,) = await store.run_claim(claim_as(wid, {"t": [2]}))
    child = versioned("1.0.0", run_at=T0 - 100)
    child.parent_id = parent.id
    (child_run,) = await store.run_insert_many([child])
    park = RunFinishParams(parent.id, claimed.fence, RunState.QUEUED, release=True, run_at=T0 + 3600,
                           event_kind="parked", now=T0)
    assert await store.run_finish_many([park]) == []
    (closed,) = await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=60, now=T0))
    assert closed.id == child_run.id
    woken = await store.run_get(parent.id)
    assert woken.state is RunState.QUEUED and woken.run_at <= T0
    assert json.loads(closed.error)["type"] == "Unrunnable"


async def test_the_age_of_the_longest_due_unrunnable_run_is_by_the_store_clock(store):
    """What the rescuer wakes by: how long the longest-due run that no live worker can run
    has been due (runnable runs, and runs not due yet, do not count)."""
    await store.worker_register(worker_of({"t": [2]}))
    assert await store.run_age_unrunnable(RunUnrunnableParams(now=T0)) is None
    await store.run_insert_many([versioned("2.0.0", run_at=T0 - 500), versioned("1.0.0", run_at=T0 + 5)])
    assert await store.run_age_unrunnable(RunUnrunnableParams(now=T0)) is None
    await store.run_insert_many([versioned("1.0.0", run_at=T0 - 7.5, tenant="a"),
                                 versioned("2.0.0", task="gpu", run_at=T0 - 2, priority=0),
                                 versioned("2.0.0", task="gpu", run_at=T0 - 12.25, priority=3)])
    assert await store.run_age_unrunnable(RunUnrunnableParams(now=T0)) == 12.25
    assert await store.run_age_unrunnable(RunUnrunnableParams(now=T0 + 10)) == 22.25
    await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=10, now=T0))
    assert await store.run_age_unrunnable(RunUnrunnableParams(now=T0)) == 7.5
