"""Store scenarios for concurrency limits per key (tasks._concurrency): the store's claim
takes a run carrying limits only while each of its (name, key) has fewer than max runs
running, counting the runs' states themselves; an end or a takeover gives the slot back,
and an operator's max applies from the next claim. Each runs on every backend."""

from __future__ import annotations

import json

from runwright.runs import RunState
from runwright.store._params import (
    LimitSetParams,
    RunCancelParams,
    RunClaimParams,
    RunExpireParams,
    RunFinishParams,
    RunInsertParams,
    RunLimitedTasksParams,
    RunNextDueParams,
    RunPauseParams,
    RunRescueParams,
    RunResumeParams,
    RunRetryParams,
)

from .helpers import T0, worker

_n = iter(range(1_000_000))


def limited(*limits: tuple[str, str, int], task: str = "lt", priority: int = 2,
            run_at: float | None = None, deadline_at: float | None = None) -> RunInsertParams:
    return RunInsertParams(key=f"lim{next(_n)}", task=task, args="{}", priority=priority, run_at=run_at,
                           now=T0, limits=json.dumps([list(limit) for limit in limits]),
                           deadline_at=deadline_at)


def plain(task: str = "t") -> RunInsertParams:
    return RunInsertParams(key=f"plain{next(_n)}", task=task, args="{}", now=T0)


def claim(worker_id: int, limit: int = 50, now: float = T0, tasks: tuple[str, ...] = ("lt", "t"),
          limited_tasks: tuple[str, ...] = ("lt",)) -> RunClaimParams:
    return RunClaimParams(worker_id, ["default"], tasks, limit, 30.0, now=now, limited=limited_tasks)


def done(run, now: float = T0) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="null", now=now, limited=True)


async def running_of(store, ids) -> list[int]:
    return [r.id for r in await store.run_get_many(list(ids)) if r.state is RunState.RUNNING]


async def test_max_is_respected_with_many_queued_and_the_rest_waits_in_order(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([limited(("crm", "acme", 2)) for _ in range(12)])
    first = await store.run_claim(claim(wid))
    assert [r.id for r in first] == [runs[0].id, runs[1].id]
    assert await store.run_claim(claim(wid)) == [], "both slots of acme are taken"
    # One ends: the next of the key, in its order, and only one.
    await store.run_finish_many([done(first[0])])
    assert [r.id for r in await store.run_claim(claim(wid))] == [runs[2].id]
    await store.run_finish_many([done(first[1])])
    assert [r.id for r in await store.run_claim(claim(wid))] == [runs[3].id]
    assert sorted(await running_of(store, [r.id for r in runs])) == [runs[2].id, runs[3].id]


async def test_a_held_key_does_not_hold_other_keys_nor_runs_without_limits(store):
    wid = await store.worker_register(worker())
    acme = await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(5)])
    other, free = await store.run_insert_many([limited(("crm", "globex", 1)), plain()])
    claimed = {r.id for r in await store.run_claim(claim(wid))}
    assert claimed == {acme[0].id, other.id, free.id}
    assert (await store.run_get(acme[1].id)).limits is not None


async def test_a_claim_that_ignores_limits_never_takes_a_limited_run(store):
    """A worker that does not know the task is limited (no `limited`) claims none of its
    runs: the limit holds in the store, not in the worker's registry."""
    wid = await store.worker_register(worker())
    await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(3)])
    (free,) = await store.run_insert_many([plain()])
    taken = await store.run_claim(claim(wid, limited_tasks=()))
    assert [r.id for r in taken] == [free.id]


async def test_a_second_limit_global_applies_too(store):
    wid = await store.worker_register(worker())
    # Per customer max 2, and all customers together max 3.
    a = await store.run_insert_many([limited(("crm", "a", 2), ("all", "*", 3)) for _ in range(3)])
    b = await store.run_insert_many([limited(("crm", "b", 2), ("all", "*", 3)) for _ in range(3)])
    taken = await store.run_claim(claim(wid))
    assert [r.id for r in taken] == [a[0].id, a[1].id, b[0].id]
    assert await store.run_claim(claim(wid)) == []
    await store.run_finish_many([done(taken[0])])
    # a has one slot free and the global one is free: a's third run goes before b's second.
    assert [r.id for r in await store.run_claim(claim(wid))] == [a[2].id]


async def test_a_dead_workers_slot_is_returned_at_takeover_never_counted_twice(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(3)])
    (held,) = await store.run_claim(claim(wid))
    assert held.id == runs[0].id
    # Its worker dies (SIGKILL: nothing more is written by it); while its lease runs the
    # slot is still taken.
    await store.worker_deregister(wid)
    other = await store.worker_register(worker())
    assert await store.run_claim(claim(other)) == []
    rescued = await store.run_rescue_many(RunRescueParams(now=T0 + 60, worker_stale_s=1e9))
    assert [r.id for r in rescued] == [held.id]
    assert (await store.run_get(held.id)).state is RunState.QUEUED
    # The slot came back with the takeover: one run of acme is claimed (in claim order:
    # the rescued one is due again from its takeover), and never two.
    again = await store.run_claim(claim(other, now=T0 + 61))
    assert len(again) == 1
    assert await store.run_claim(claim(other, now=T0 + 61)) == []
    assert await running_of(store, [r.id for r in runs]) == [again[0].id]
    await store.run_finish_many([done(again[0], now=T0 + 62)])
    assert len(await store.run_claim(claim(other, now=T0 + 63))) == 1


async def test_a_max_changed_live_takes_effect_at_the_next_claim(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(6)])
    assert len(await store.run_claim(claim(wid))) == 1
    await store.limit_set(LimitSetParams("crm", 3))  # the name: every key of it
    assert len(await store.run_claim(claim(wid))) == 2
    await store.limit_set(LimitSetParams("crm:acme", 4))  # the key wins over its name
    assert len(await store.run_claim(claim(wid))) == 1
    await store.limit_set(LimitSetParams("crm:acme", 0))  # lowered: nothing more starts
    assert await store.run_claim(claim(wid)) == []
    assert len(await running_of(store, [r.id for r in runs])) == 4, "running ones go on"
    await store.limit_set(LimitSetParams("crm:acme", None))
    await store.limit_set(LimitSetParams("crm", None))
    assert await store.limit_overrides() == {}
    uses = await store.limit_list()
    assert [(u.name, u.key, u.max, u.running, u.queued) for u in uses] == [("crm", "acme", 1, 4, 2)]


async def test_a_claim_along_with_finishes_respects_limits(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(3)])
    (first,) = await store.run_claim(claim(wid))
    finish = done(first)
    finish.alone = True  # the one-statement path where a store has one (PostgreSQL)
    refused, claimed = await store.run_finish_claim([finish], claim(wid))
    assert refused == []
    # The claim may or may not see the slot the finish frees (run_finish_claim's
    # contract), but never takes more than max.
    assert len(claimed) <= 1
    if not claimed:
        claimed = await store.run_claim(claim(wid))
    assert [r.id for r in claimed] == [runs[1].id]
    assert await running_of(store, [r.id for r in runs]) == [runs[1].id]


async def test_priority_orders_within_a_key(store):
    wid = await store.worker_register(worker())
    low = await store.run_insert_many([limited(("crm", "acme", 1), priority=3)])
    high = await store.run_insert_many([limited(("crm", "acme", 1), priority=0)])
    assert [r.id for r in await store.run_claim(claim(wid))] == [high[0].id]
    assert (await store.run_get(low[0].id)).state is RunState.QUEUED


async def test_a_full_keys_backlog_does_not_delay_another_keys_run(store):
    """Fairness: a big tenant's backlog, held behind its full key and ahead in claim
    order, costs another key's run nothing: one claim of one run takes the other key's.
    More runs than a store may look at in one claim (Redis's due walk gave up at 2,000)."""
    wid = await store.worker_register(worker())
    big = await store.run_insert_many([limited(("tenant", "big", 1)) for _ in range(2500)])
    assert [r.id for r in await store.run_claim(claim(wid))] == [big[0].id]
    (small,) = await store.run_insert_many([limited(("tenant", "small", 1))])
    assert [r.id for r in await store.run_claim(claim(wid, limit=1))] == [small.id]
    assert await store.run_claim(claim(wid)) == [], "both keys are full"


async def test_claim_order_holds_across_keys_with_room(store):
    """The runs of keys with room are taken in claim order (priority, run_at, then
    submission), across keys, whatever key each is of; a full key's are passed over."""
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many(
        [limited(("tenant", "a", 2), run_at=T0 - 5), limited(("tenant", "b", 2), run_at=T0 - 9),
         limited(("tenant", "a", 2), run_at=T0 - 9), limited(("tenant", "c", 1), run_at=T0 - 9),
         limited(("tenant", "c", 1), run_at=T0 - 8), limited(("tenant", "b", 2), run_at=T0 - 1),
         limited(("tenant", "a", 2), run_at=T0 - 7)])
    taken = await store.run_claim(claim(wid, limit=4))
    # Due at -9: b, a, c (by submission); -8: c's second, held (c max 1); -7: a's third.
    assert [r.id for r in taken] == [runs[1].id, runs[2].id, runs[3].id, runs[6].id]
    rest = await store.run_claim(claim(wid))
    assert [r.id for r in rest] == [runs[5].id], "a has 2 running, c 1: only b's second"


async def test_queued_limited_runs_cancelled_paused_expired_retried_keep_the_key_in_order(store):
    """Everything that takes a queued run out of its due set or puts it back keeps a
    limited claim's view of the key whole: a cancelled, paused or expired run is never
    claimed, a resumed, retried or given-back one is, in its turn."""
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(4)] +
                                       [limited(("crm", "acme", 1), deadline_at=T0 + 5)] +
                                       [limited(("crm", "acme", 1))])
    (first,) = await store.run_claim(claim(wid))
    assert first.id == runs[0].id
    await store.run_cancel(RunCancelParams(runs[1].id, now=T0))
    await store.run_pause(RunPauseParams(runs[2].id, now=T0))
    await store.run_finish_many([done(first)])
    (third,) = await store.run_claim(claim(wid))
    assert third.id == runs[3].id, "the cancelled and the paused one are passed over"
    await store.run_resume(RunResumeParams(runs[2].id, now=T0 + 1))
    # Given back (a requeue): due again at once, ahead of the resumed one by its run_at.
    await store.run_finish_many([RunFinishParams(third.id, third.fence, RunState.QUEUED, now=T0 + 1,
                                                 run_at=T0 - 1, limited=True)])
    (again,) = await store.run_claim(claim(wid, now=T0 + 1))
    assert again.id == runs[3].id
    assert await store.run_claim(claim(wid, now=T0 + 1)) == []
    expired = await store.run_expire_many(RunExpireParams(now=T0 + 10))
    assert [r.id for r in expired] == [runs[4].id]
    await store.run_finish_many([RunFinishParams(again.id, again.fence, RunState.FAILED, error="x",
                                                 now=T0 + 10, limited=True)])
    # The resumed one and the last, one at a time (the key's max), then the retried one.
    left = {runs[2].id, runs[5].id}
    for at in (T0 + 10, T0 + 11):
        (taken,) = await store.run_claim(claim(wid, now=at))
        assert taken.id in left
        left.discard(taken.id)
        assert await store.run_claim(claim(wid, now=at)) == []
        await store.run_finish_many([done(taken, now=at)])
    await store.run_retry(RunRetryParams(runs[3].id, now=T0 + 12))
    assert [r.id for r in await store.run_claim(claim(wid, now=T0 + 12))] == [runs[3].id]
    assert await store.run_claim(claim(wid, now=T0 + 12)) == []


async def test_a_full_keys_backlog_hides_no_other_keys_runs_nor_their_order(store):
    """With a key full and more of its runs queued than one read of the due runs holds, a
    claim still takes the other keys' runs, in claim order across keys, within each key's
    room, a limit they share and an operator's max (the store reads each key's first runs
    apart rather than stepping over the backlog: the order and the limits stay the same)."""
    wid = await store.worker_register(worker())
    every = ("all", "*", 3)
    acme = await store.run_insert_many([limited(("crm", "acme", 1), every) for _ in range(250)])
    (first,) = await store.run_claim(claim(wid, limit=1))
    assert first.id == acme[0].id
    globex = await store.run_insert_many([limited(("crm", "globex", 2), every) for _ in range(3)])
    initech = await store.run_insert_many([limited(("crm", "initech", 1), every, priority=1)
                                           for _ in range(2)])
    # The shared limit has room for two: initech's first (a better priority, submitted
    # later), then globex's first; not two of globex's, each key having room for them.
    taken = await store.run_claim(claim(wid))
    assert [r.id for r in taken] == [initech[0].id, globex[0].id]
    assert await store.run_claim(claim(wid)) == []
    await store.limit_set(LimitSetParams("crm:globex", 3))
    await store.limit_set(LimitSetParams("all", 5))
    assert [r.id for r in await store.run_claim(claim(wid))] == [globex[1].id, globex[2].id]
    assert await store.run_claim(claim(wid)) == []
    # Slots given back: initech's next, then acme's next, in their order.
    await store.run_finish_many([done(r) for r in (*taken, first)])
    assert [r.id for r in await store.run_claim(claim(wid))] == [initech[1].id, acme[1].id]


async def test_when_the_next_limited_run_comes_due_past_a_held_backlog(store):
    """A worker whose due limited runs are held back asks when the next limited run comes
    due (runs="limited_later"): the due ones do not answer, a later one does; its runs
    without limits are asked apart ("unlimited"), and "any" is every queued run."""
    wid = await store.worker_register(worker())
    await store.run_insert_many([limited(("crm", "acme", 1)) for _ in range(3)])
    assert len(await store.run_claim(claim(wid))) == 1

    def asked(runs: str, tasks: list[str]) -> RunNextDueParams:
        return RunNextDueParams(["default"], tasks, runs=runs, now=T0 + 1)  # type: ignore[arg-type]

    assert await store.run_next_due_at(asked("limited_later", ["lt"])) is None
    await store.run_insert_many([limited(("crm", "acme", 1), run_at=T0 + 100),
                                 limited(("crm", "acme", 1), run_at=T0 + 50, task="other")])
    assert await store.run_next_due_at(asked("limited_later", ["lt"])) == T0 + 100
    assert await store.run_next_due_at(asked("any", ["lt"])) == T0
    assert await store.run_next_due_at(asked("unlimited", ["t"])) is None
    await store.run_insert_many([RunInsertParams(key="later-plain", task="t", args="{}", now=T0,
                                                 run_at=T0 + 70)])
    assert await store.run_next_due_at(asked("unlimited", ["t"])) == T0 + 70
    assert await store.run_next_due_at(asked("limited_later", ["lt", "other"])) == T0 + 50


async def test_the_tasks_with_queued_runs_that_carry_limits(store):
    """What a worker that declares no limit for a task asks, to find that task's runs
    queued with limits (a deploy removed them): only queued runs, only those with limits."""
    wid = await store.worker_register(worker())
    assert await store.run_limited_tasks(RunLimitedTasksParams(["default"], ["lt", "t", "u"])) == set()
    (held,) = await store.run_insert_many([limited(("crm", "acme", 1))])
    await store.run_insert_many([plain(), plain("u")])
    assert await store.run_limited_tasks(RunLimitedTasksParams(["default"], ["lt", "t", "u"])) == {"lt"}
    assert await store.run_limited_tasks(RunLimitedTasksParams(["other"], ["lt"])) == set()
    assert held.id in [r.id for r in await store.run_claim(claim(wid))]
    assert await store.run_limited_tasks(RunLimitedTasksParams(["default"], ["lt"])) == set()  # none queued
