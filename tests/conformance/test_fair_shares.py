"""Store scenarios for fair shares across keys (tasks._fair, store._fair_rules): a fair
claim takes, among the keys with due runs, the run of the key served least by weight, so
one key's backlog delays another key's run by at most one claim; weights give shares of
a claim sequence, an operator's weight holds from the next claim, and priority still
orders within a key. Each runs on every backend."""

from __future__ import annotations

import json
from collections import Counter

from runwright.runs import RunState
from runwright.store._fair_rules import PREFIX
from runwright.store._params import (
    FlowKeyReclaimParams,
    LimitSetParams,
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
)

from .helpers import T0, worker

_n = iter(range(1_000_000))


def fair(key: str, *limits: tuple[str, str, int], priority: int = 2, at: float = T0,
         task: str = "ft") -> RunInsertParams:
    text = json.dumps([*(list(limit) for limit in limits), [PREFIX + "tenant", key, 1]])
    return RunInsertParams(key=f"fair{next(_n)}", task=task, args="{}", priority=priority, run_at=at,
                           now=T0, limits=text)


def claim(worker_id: int, limit: int = 1, now: float = T0 + 1, is_fair: bool = True) -> RunClaimParams:
    return RunClaimParams(worker_id, ["default"], ("ft", "t"), limit, 30.0, now=now, limited=("ft",),
                          fair=is_fair)


def done(run, now: float = T0 + 1) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="null", now=now, limited=True)


def tenant_of(run) -> str:
    return next(k for n, k, _ in json.loads(run.limits) if n.startswith(PREFIX))


async def claim_one_at_a_time(store, wid: int, n: int, finish: bool = True) -> list[str]:
    """The tenants of `n` claims of one run each, each ended before the next claim when
    `finish` (a one-slot fleet: no run is running at the next claim)."""
    out = []
    for _ in range(n):
        (run,) = await store.run_claim(claim(wid))
        out.append(tenant_of(run))
        if finish:
            await store.run_finish_many([done(run)])
    return out


async def test_a_big_keys_backlog_does_not_delay_another_keys_run_beyond_one_claim(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([fair("a", at=T0 - 100 + i / 1000) for i in range(300)])
    assert await claim_one_at_a_time(store, wid, 3) == ["a", "a", "a"]
    # b's one run, submitted behind a's backlog, is the next claim's, though a's runs
    # came due first and no run of a is running (a one-slot fleet ends each first).
    (b,) = await store.run_insert_many([fair("b", at=T0)])
    (taken,) = await store.run_claim(claim(wid))
    assert taken.id == b.id
    await store.run_finish_many([done(taken)])
    # Then a again: its backlog is not punished for b's turn.
    assert await claim_one_at_a_time(store, wid, 2) == ["a", "a"]


async def test_keys_take_turns_within_one_claim_and_claims_without_fair_keep_claim_order(store):
    wid = await store.worker_register(worker())
    a = await store.run_insert_many([fair("a", at=T0 - 10 + i / 100) for i in range(10)])
    b = await store.run_insert_many([fair("b", at=T0 - 5 + i / 100) for i in range(2)])
    # A claim that is not fair (fair=False) takes them in claim order: a's first.
    other = await store.worker_register(worker())
    assert [r.id for r in await store.run_claim(claim(other, limit=2, is_fair=False))] == [a[0].id, a[1].id]
    # A fair claim of four takes both of b's between a's: a, b, a, b.
    taken = await store.run_claim(claim(wid, limit=4))
    assert sorted(r.id for r in taken) == sorted([a[2].id, a[3].id, b[0].id, b[1].id])


async def test_weights_give_proportional_shares_of_a_claim_sequence(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([fair("a", at=T0 - 100 + i / 1000) for i in range(60)])
    await store.run_insert_many([fair("b", at=T0 - 50 + i / 1000) for i in range(60)])
    await store.limit_set(LimitSetParams(PREFIX + "tenant:a", 3))
    served = Counter(await claim_one_at_a_time(store, wid, 40))
    assert served == {"a": 30, "b": 10}, served


async def test_a_weight_changed_live_holds_from_the_next_claim(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([fair("a", at=T0 - 100 + i / 1000) for i in range(60)])
    await store.run_insert_many([fair("b", at=T0 - 50 + i / 1000) for i in range(60)])
    first = Counter(await claim_one_at_a_time(store, wid, 10))
    assert first == {"a": 5, "b": 5}, first
    # The weight of every key of "tenant" (its name's), then one key's, which wins.
    await store.limit_set(LimitSetParams(PREFIX + "tenant", 2))
    await store.limit_set(LimitSetParams(PREFIX + "tenant:b", 6))
    after = Counter(await claim_one_at_a_time(store, wid, 16, finish=False))
    # b at 6 against a at 2: three of every four claims, give or take the one claim
    # whose pass was moved under the old weight.
    assert after["b"] in (11, 12, 13), after
    # Removed: equal again, from the next claim.
    await store.limit_set(LimitSetParams(PREFIX + "tenant:b", None))
    await store.limit_set(LimitSetParams(PREFIX + "tenant", None))
    again = Counter(await claim_one_at_a_time(store, wid, 10, finish=False))
    assert again["b"] in (4, 5, 6), again


async def test_priority_orders_within_a_key_and_goes_first_across_keys(store):
    wid = await store.worker_register(worker())
    (a0,) = await store.run_insert_many([fair("a", priority=5, at=T0 - 30)])
    assert [r.id for r in await store.run_claim(claim(wid))] == [a0.id]  # a was served last
    a_low = await store.run_insert_many([fair("a", priority=5, at=T0 - 10 + i) for i in range(2)])
    (b_low,) = await store.run_insert_many([fair("b", priority=5, at=T0 - 20)])
    (a_high,) = await store.run_insert_many([fair("a", priority=1, at=T0)])
    order = []
    for _ in range(4):
        (run,) = await store.run_claim(claim(wid))
        order.append(run.id)
        await store.run_finish_many([done(run)])
    # a's priority-1 run first, though a was served last and b was not: priority before
    # fairness; then b's turn at priority 5, then a's runs in their due order.
    assert order == [a_high.id, b_low.id, a_low[0].id, a_low[1].id]


async def test_a_key_that_comes_back_is_not_owed_its_idle_time(store):
    """A key with nothing queued for a while (or never seen) comes back at V, the pass of
    the key served last: it takes turns from then on, it is not given a burst that would
    delay the others by as many claims as it sat out."""
    wid = await store.worker_register(worker())
    await store.run_insert_many([fair("a", at=T0 - 100 + i / 1000) for i in range(30)])
    await store.run_insert_many([fair("b", at=T0 - 90 + i / 1000) for i in range(2)])
    assert Counter(await claim_one_at_a_time(store, wid, 4)) == {"a": 2, "b": 2}
    assert await claim_one_at_a_time(store, wid, 10) == ["a"] * 10  # b has none queued
    await store.run_insert_many([fair("b", at=T0 - 1 + i / 1000) for i in range(10)])
    await store.run_insert_many([fair("c", at=T0 - 1 + i / 1000) for i in range(10)])  # never seen
    assert Counter(await claim_one_at_a_time(store, wid, 9)) == {"a": 3, "b": 3, "c": 3}


async def test_every_fair_key_is_seen_past_runs_of_other_limited_keys(store):
    """Runs of limited keys without fairness between the fair keys in claim order do not
    hide the fair keys behind them from the claim's turns."""
    wid = await store.worker_register(worker())
    a = await store.run_insert_many([fair("a", at=T0 - 50 + i) for i in range(3)])
    limited = [RunInsertParams(key=f"lim{next(_n)}", task="ft", args="{}", priority=2, run_at=at, now=T0,
                               limits=json.dumps([["crm", key, 5]]))
               for key, at in (("x", T0 - 40), ("x", T0 - 39), ("y", T0 - 30))]
    await store.run_insert_many(limited)
    (b,) = await store.run_insert_many([fair("b", at=T0 - 20)])
    taken = await store.run_claim(claim(wid, limit=2))
    assert sorted(r.id for r in taken) == sorted([a[0].id, b.id])


async def test_fair_keys_obey_the_limits_the_run_carries_too(store):
    wid = await store.worker_register(worker())
    a = await store.run_insert_many([fair("a", ("crm", "a", 1)) for _ in range(3)])
    b = await store.run_insert_many([fair("b", ("crm", "b", 1)) for _ in range(3)])
    taken = await store.run_claim(claim(wid, limit=10))
    assert sorted(r.id for r in taken) == sorted([a[0].id, b[0].id])
    # A fair key is no limit: no key "tenant:a" is listed.
    assert {(u.name, u.key) for u in await store.limit_list()} == {("crm", "a"), ("crm", "b")}


async def test_fair_keys_obey_the_rates_the_run_carries_too(store):
    wid = await store.worker_register(worker())
    text = json.dumps([["rps", "a", 1, 3600, 1], [PREFIX + "tenant", "a", 1]])
    rated = [RunInsertParams(key=f"fr{next(_n)}", task="ft", args="{}", run_at=T0 - 10 + i, priority=2,
                             now=T0, limits=text) for i in range(3)]
    a = await store.run_insert_many(rated)
    b = await store.run_insert_many([fair("b", at=T0 - 5 + i) for i in range(3)])
    taken = await store.run_claim(claim(wid, limit=10))
    # a's rate lets one of its runs start this hour; b's turns are not held by it.
    assert sorted(r.id for r in taken) == sorted([a[0].id, *(r.id for r in b)])


async def test_the_sweep_of_flow_control_records_keeps_the_fair_passes(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([fair("a", at=T0 - 100 + i / 1000) for i in range(30)])
    assert await claim_one_at_a_time(store, wid, 10) == ["a"] * 10  # a's pass and V move on
    assert await store.flow_key_reclaim(FlowKeyReclaimParams(limit=1000)) == 0
    # b comes at V and a after it, by one claim, not by the ten it was served.
    await store.run_insert_many([fair("b", at=T0 - 1 + i / 1000) for i in range(10)])
    assert await claim_one_at_a_time(store, wid, 6) == ["b", "a", "b", "a", "b", "a"]


async def test_a_weight_is_not_listed_as_a_limit(store):
    await store.limit_set(LimitSetParams(PREFIX + "tenant:a", 3))
    await store.limit_set(LimitSetParams("crm", 4))
    assert [(u.name, u.max) for u in await store.limit_list()] == [("crm", 4)]
