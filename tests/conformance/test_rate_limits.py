"""Store scenarios for rates per key (tasks._rates, store._rate_rules): the limited claim
starts a run carrying a rate only while its key's spends of the last `per_s` seconds leave
room for its cost, and writes its spend in the claim itself; a run held back waits (reason
`rate`, with when it may start) and is claimed once the window allows; an operator's max
applies from the next claim; a spend is never given back. Each runs on every backend."""

from __future__ import annotations

import json

from runwright.client._why import waiting_of
from runwright.runs import RunState, WaitReason
from runwright.store._params import (
    LimitSetParams,
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    WorkerRegisterParams,
)

from .helpers import T0

_n = iter(range(1_000_000))


def rate(name: str, key: str, max: int, per_s: float, cost: float = 1) -> list:
    return [name, key, max, per_s, cost]


def rated(*entries: list, task: str = "lt", priority: int = 2) -> RunInsertParams:
    return RunInsertParams(key=f"rate{next(_n)}", task=task, args="{}", priority=priority, now=T0,
                           limits=json.dumps(list(entries)))


def claim(worker_id: int, now: float, limit: int = 50) -> RunClaimParams:
    return RunClaimParams(worker_id, ["default"], ("lt", "t"), limit, 30.0, now=now, limited=("lt",))


def done(run, now: float) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="null", now=now, limited=True)


def worker(now: float = T0) -> WorkerRegisterParams:
    return WorkerRegisterParams(host="test-host", pid=1, queues=["default"], tasks=["lt", "t"], now=now)


async def ids(store, now: float, wid: int) -> list[int]:
    return [r.id for r in await store.run_claim(claim(wid, now))]


async def rate_use(store, name: str, key: str):
    (use,) = [u for u in await store.limit_list() if (u.name, u.key) == (name, key)]
    return use


async def test_runs_over_their_rate_wait_and_are_claimed_when_the_window_allows(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([rated(rate("r", "acme", 2, 60)) for _ in range(5)])
    (other,) = await store.run_insert_many([rated(rate("r", "globex", 2, 60))])
    assert await ids(store, T0, wid) == [runs[0].id, runs[1].id, other.id]
    # Their ends give nothing back: a start spent the window's room.
    for run in await store.run_get_many([runs[0].id, runs[1].id]):
        await store.run_finish_many([done(run, T0 + 1)])
    assert await ids(store, T0 + 1, wid) == []
    assert await ids(store, T0 + 59.9, wid) == []
    # The window of the first two starts ends at T0 + 60: two more, in their order.
    assert await ids(store, T0 + 60, wid) == [runs[2].id, runs[3].id]
    assert await ids(store, T0 + 60, wid) == []
    assert await ids(store, T0 + 120, wid) == [runs[4].id]
    started = [r.started_at for r in await store.run_get_many([r.id for r in runs])]
    assert started == [T0, T0, T0 + 60, T0 + 60, T0 + 120]


async def test_the_window_slides_with_each_start(store):
    """At most max in any window of per_s seconds, not per fixed period: a start at T0+30
    holds its room until T0+90."""
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([rated(rate("s", "k", 2, 60)) for _ in range(4)])
    assert [r.id for r in await store.run_claim(claim(wid, T0, limit=1))] == [runs[0].id]
    assert await ids(store, T0 + 30, wid) == [runs[1].id]
    assert await ids(store, T0 + 59, wid) == []
    # The first start's window ended; the second's holds.
    assert await ids(store, T0 + 60, wid) == [runs[2].id]
    assert await ids(store, T0 + 89, wid) == []
    assert await ids(store, T0 + 90, wid) == [runs[3].id]


async def test_a_weighted_cost_is_spent_and_a_keys_runs_start_in_their_order(store):
    wid = await store.worker_register(worker())
    big = [rated(rate("tokens", "acme", 10, 60, cost)) for cost in (4, 4, 4, 1)]
    runs = await store.run_insert_many(big)
    # 4 + 4 = 8; the third (4) does not fit, and the cheap one behind it waits its turn.
    assert await ids(store, T0, wid) == [runs[0].id, runs[1].id]
    use = await rate_use(store, "tokens", "acme")
    assert (use.spent, use.max, use.per_s) == (8, 10, 60)
    assert await ids(store, T0 + 30, wid) == []
    assert await ids(store, T0 + 60, wid) == [runs[2].id, runs[3].id]


async def test_a_max_changed_live_takes_effect_at_the_next_claim(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([rated(rate("crm", "acme", 1, 60)) for _ in range(6)])
    assert await ids(store, T0, wid) == [runs[0].id]
    assert await ids(store, T0 + 1, wid) == []
    await store.limit_set(LimitSetParams("crm", 2))  # the name: every key of it
    assert await ids(store, T0 + 2, wid) == [runs[1].id]
    await store.limit_set(LimitSetParams("crm:acme", 4))  # the key wins over its name
    assert await ids(store, T0 + 3, wid) == [runs[2].id, runs[3].id]
    use = await rate_use(store, "crm", "acme")
    assert (use.max, use.spent, use.overridden) == (4, 4, True)
    await store.limit_set(LimitSetParams("crm:acme", 0))  # lowered: nothing more starts
    assert await ids(store, T0 + 200, wid) == []
    await store.limit_set(LimitSetParams("crm:acme", None))
    await store.limit_set(LimitSetParams("crm", None))
    assert await ids(store, T0 + 200, wid) == [runs[4].id], "the max the runs carry applies again"


async def test_a_run_held_by_its_rate_says_so_and_when_it_may_start(store):
    wid = await store.worker_register(worker())
    first, second = await store.run_insert_many([rated(rate("crm", "acme", 1, 60)) for _ in range(2)])
    assert await ids(store, T0, wid) == [first.id]
    held = await store.run_get(second.id)

    class Scope:
        def now(self) -> float:
            return T0 + 10

        async def list_workers(self):
            return await store.worker_list()

        async def list_runs(self, **_):
            return []

        async def unrunnable_kinds(self):
            return []

        async def limit_uses(self):
            return await store.limit_list()

    why = (await waiting_of(Scope(), [held]))[held.id]
    assert why.reason is WaitReason.RATE
    assert why.until == T0 + 60
    assert "rate 'crm' of key 'acme' has 1 of 1 started in its 60 s window" in why.detail
    # Lowered under its cost: it waits for the max to be raised, with no time to give.
    await store.limit_set(LimitSetParams("crm:acme", 0))
    why = (await waiting_of(Scope(), [held]))[held.id]
    assert (why.reason, why.until) == (WaitReason.RATE, None)
    assert "over the max" in why.detail


async def test_a_start_taken_over_after_its_worker_died_is_not_given_back(store):
    """A SIGKILLed worker's run is queued again by the takeover; its start spent the
    window's room, which is not given back: the run starts again once the window allows,
    and that start spends again."""
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([rated(rate("crm", "acme", 1, 60))])
    assert await ids(store, T0, wid) == [run.id]
    await store.worker_deregister(wid)
    other = await store.worker_register(worker())
    rescued = await store.run_rescue_many(RunRescueParams(now=T0 + 31, worker_stale_s=1e9))
    assert [r.id for r in rescued] == [run.id]
    assert await ids(store, T0 + 32, other) == []
    assert (await rate_use(store, "crm", "acme")).spent == 1
    assert await ids(store, T0 + 60, other) == [run.id]
    assert (await store.run_get(run.id)).attempt >= 1


async def test_a_run_held_by_its_concurrency_limit_spends_nothing(store):
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([rated(["c", "acme", 1], rate("r", "acme", 10, 60))
                                        for _ in range(3)])
    (first,) = await store.run_claim(claim(wid, T0))
    assert first.id == runs[0].id
    assert await ids(store, T0 + 1, wid) == []
    assert (await rate_use(store, "r", "acme")).spent == 1
    await store.run_finish_many([done(first, T0 + 2)])
    assert await ids(store, T0 + 3, wid) == [runs[1].id]
    use = await rate_use(store, "r", "acme")
    assert (use.spent, use.running, use.queued) == (2, 1, 1)


async def test_a_global_rate_beside_a_per_key_one(store):
    """A run held by its key's rate holds back nothing of the global rate's other keys."""
    wid = await store.worker_register(worker())
    a = await store.run_insert_many([rated(rate("per", "a", 1, 60), rate("all", "*", 3, 60))
                                     for _ in range(3)])
    b = await store.run_insert_many([rated(rate("per", "b", 2, 60), rate("all", "*", 3, 60))
                                     for _ in range(3)])
    assert await ids(store, T0, wid) == [a[0].id, b[0].id, b[1].id]
    assert await ids(store, T0 + 60, wid) == [a[1].id, b[2].id]


async def test_a_run_held_by_its_limit_takes_no_room_from_a_shared_rate_in_the_same_claim(store):
    wid = await store.worker_register(worker())
    a = await store.run_insert_many([rated(["c", "a", 1], rate("all", "*", 2, 60)) for _ in range(2)])
    (b,) = await store.run_insert_many([rated(["c", "b", 1], rate("all", "*", 2, 60))])
    assert await ids(store, T0, wid) == [a[0].id, b.id]
    assert (await rate_use(store, "all", "*")).spent == 2
