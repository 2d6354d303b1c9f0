"""Store scenarios for flow control per key at submission (tasks._flow, store._flow_rules):
singleton, debounce and throttle, decided by the store in the insert, under the key's
lock; concurrent submitters of one key see one order. Each runs on every backend."""

from __future__ import annotations

import asyncio
import json

import pytest

from runwright.errors import InvalidInput, SingletonTaken
from runwright.runs import RunState, WaitReason
from runwright.store._params import RunClaimParams, RunFinishParams, RunInsertParams

from .helpers import T0, worker

_n = iter(range(1_000_000))


def flowed(kind: str, key: str = "order-1", mode: str = "", seconds: float = 0.0, *, now: float = T0,
           args: dict | None = None, run_key: str | None = None, task: str = "t") -> RunInsertParams:
    return RunInsertParams(key=run_key or f"flow{next(_n)}", task=task, args=json.dumps(args or {"n": 0}),
                           now=now, key_is_fresh=run_key is None,
                           flow=json.dumps([kind, "orders", key, mode, seconds]))


def singleton(mode: str = "refuse", key: str = "order-1", **kw) -> RunInsertParams:
    return flowed("singleton", key, mode, **kw)


def debounce(window_s: float = 5.0, key: str = "order-1", **kw) -> RunInsertParams:
    return flowed("debounce", key, "", window_s, **kw)


def throttle(mode: str = "drop", per_s: float = 60.0, key: str = "order-1", **kw) -> RunInsertParams:
    return flowed("throttle", key, mode, per_s, **kw)


async def one(store, params: RunInsertParams):
    (run,) = await store.run_insert_many([params])
    return run


def claim(worker_id: int, now: float = T0) -> RunClaimParams:
    return RunClaimParams(worker_id, ["default"], ["t"], 10, 30.0, now=now)


def done(run, now: float = T0) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="null", now=now)


async def queued_of(store, ids) -> list[int]:
    return [r.id for r in await store.run_get_many(list(ids)) if r.state is RunState.QUEUED]


# -- singleton ---------------------------------------------------------------------------


async def test_singleton_refuses_while_the_key_has_a_queued_or_running_run(store):
    first = await one(store, singleton())
    assert first.outcome == "new" and first.state is RunState.QUEUED
    with pytest.raises(SingletonTaken) as refused:
        await one(store, singleton())
    assert refused.value.run_id == first.id and refused.value.key == "order-1"
    assert "order-1" in str(refused.value) and str(first.id) in str(refused.value)
    other = await one(store, singleton(key="order-2"))
    assert other.outcome == "new", "another key is not held"
    wid = await store.worker_register(worker())
    (running,) = [r for r in await store.run_claim(claim(wid)) if r.id == first.id]
    with pytest.raises(SingletonTaken):
        await one(store, singleton())
    await store.run_finish_many([done(running)])
    again = await one(store, singleton())
    assert again.outcome == "new" and again.id not in (first.id, other.id), "the key's run ended"


async def test_singleton_replace_cancels_the_queued_run_but_never_a_running_one(store):
    first = await one(store, singleton("replace", args={"n": 1}))
    second = await one(store, singleton("replace", args={"n": 2}))
    assert second.outcome == "replaced" and second.replaced == first.id and second.id != first.id
    old = await store.run_get(first.id)
    assert old.state is RunState.CANCELLED
    assert f"replaced by run {second.id}" in old.error_info()["message"]
    assert await queued_of(store, [first.id, second.id]) == [second.id]
    wid = await store.worker_register(worker())
    assert [r.id for r in await store.run_claim(claim(wid))] == [second.id]
    with pytest.raises(SingletonTaken) as refused:
        await one(store, singleton("replace", args={"n": 3}))
    assert refused.value.run_id == second.id and refused.value.state == "running"
    assert (await store.run_get(second.id)).state is RunState.RUNNING


async def test_singleton_replace_never_replaces_a_run_queued_again_after_it_started(store):
    """A run between attempts (a retry's backoff) has a journal, perhaps children: as good
    as running, it is kept, and the submission refused."""
    first = await one(store, singleton("replace"))
    wid = await store.worker_register(worker())
    (running,) = await store.run_claim(claim(wid))
    retry = RunFinishParams(running.id, running.fence, RunState.QUEUED, error='{"type": "E"}',
                            run_at=T0 + 30, now=T0, waiting="retry")
    assert await store.run_finish_many([retry]) == []
    assert (await store.run_get(first.id)).state is RunState.QUEUED
    with pytest.raises(SingletonTaken) as refused:
        await one(store, singleton("replace"))
    assert refused.value.run_id == first.id and refused.value.state == "queued"


async def test_concurrent_singleton_submitters_make_exactly_one_run(store):
    results = await asyncio.gather(*(one(store, singleton(key="race")) for _ in range(8)),
                                   return_exceptions=True)
    made = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, SingletonTaken)]
    assert len(made) == 1 and len(refused) == 7, results
    assert {r.run_id for r in refused} == {made[0].id}


async def test_a_key_named_again_gets_its_run_before_any_flow_decision(store):
    first = await one(store, singleton(run_key="same"))
    again = await one(store, singleton(run_key="same"))
    assert again.id == first.id and again.existed and again.outcome is None


async def test_a_batch_mixes_runs_with_and_without_flow_control(store):
    plain = RunInsertParams(key=f"plain{next(_n)}", task="t", args="{}", now=T0)
    runs = await store.run_insert_many([plain, singleton(key="batch"), debounce(key="batch-d")])
    assert [r.outcome for r in runs] == [None, "new", "new"]
    assert len({r.id for r in runs}) == 3


async def test_the_callers_transaction_refuses_flow_control(store):
    if not store.keeps_transactions:
        pytest.skip("no transactions of the caller's on this backend")
    with pytest.raises(InvalidInput, match="flow control"):
        await store.run_insert_in(object(), [singleton(key="tx")])


# -- debounce ----------------------------------------------------------------------------


async def test_debounce_the_last_submission_in_the_window_wins(store):
    first = await one(store, debounce(args={"n": 1}))
    assert first.outcome == "new" and first.run_at == T0 + 5
    second = await one(store, debounce(args={"n": 2}, now=T0 + 1))
    assert second.id == first.id and second.outcome == "debounced"
    assert second.arguments() == {"n": 2} and second.run_at == T0 + 6
    stored = await store.run_get(first.id)
    assert stored.arguments() == {"n": 2} and stored.run_at == T0 + 6
    wid = await store.worker_register(worker(now=T0 + 2))
    assert await store.run_claim(claim(wid, now=T0 + 5)) == [], "its window was pushed on"
    (running,) = await store.run_claim(claim(wid, now=T0 + 6))
    assert running.id == first.id and running.arguments() == {"n": 2}
    third = await one(store, debounce(args={"n": 3}, now=T0 + 7))
    assert third.outcome == "new" and third.id != first.id, "once running, a new window opens"
    assert third.run_at == T0 + 12
    assert (await store.run_get(first.id)).arguments() == {"n": 2}


async def test_concurrent_debounce_submitters_leave_one_queued_run(store):
    results = await asyncio.gather(*(one(store, debounce(key="race", args={"n": i})) for i in range(8)))
    assert len({r.id for r in results}) == 1
    assert sorted(r.outcome for r in results) == ["debounced"] * 7 + ["new"]
    stored = await store.run_get(results[0].id)
    # Applied in one order: the run holds the arguments of the one applied last.
    last = max(results, key=lambda r: r.last_seq)
    assert stored.arguments() == last.arguments()


def merging(params: RunInsertParams) -> RunInsertParams:
    """A debounce whose merge unions the standing run's items with the new ones (as
    tasks._submission makes it, over the stored texts)."""
    def merge(standing: str, new: str) -> str:
        return json.dumps({"items": sorted(json.loads(standing)["items"] + json.loads(new)["items"])})

    params.merge = merge
    return params


async def test_debounce_merges_each_submission_into_the_queued_run_once(store):
    first = await one(store, merging(debounce(args={"items": [1]})))
    second = await one(store, merging(debounce(args={"items": [2]}, now=T0 + 1)))
    assert second.id == first.id and second.outcome == "debounced"
    assert (await store.run_get(first.id)).arguments() == {"items": [1, 2]}
    # Once the run started, a submission opens a new window, merged into nothing.
    wid = await store.worker_register(worker())
    assert [r.id for r in await store.run_claim(claim(wid, now=T0 + 6))] == [first.id]
    third = await one(store, merging(debounce(args={"items": [3]}, now=T0 + 7)))
    assert third.id != first.id and (await store.run_get(third.id)).arguments() == {"items": [3]}


async def test_concurrent_merging_debouncers_lose_no_item(store):
    results = await asyncio.gather(*(one(store, merging(debounce(key="merge-race", args={"items": [i]})))
                                     for i in range(12)))
    assert len({r.id for r in results}) == 1
    assert (await store.run_get(results[0].id)).arguments() == {"items": list(range(12))}


# -- throttle ----------------------------------------------------------------------------


async def test_throttle_drops_what_comes_within_the_period(store):
    first = await one(store, throttle(args={"n": 1}))
    assert first.outcome == "new" and first.run_at == T0
    dropped = await one(store, throttle(args={"n": 2}, now=T0 + 10))
    assert dropped.outcome == "dropped" and dropped.id == first.id
    assert dropped.arguments() == {"n": 1}, "nothing of a dropped submission is written"
    later = await one(store, throttle(args={"n": 3}, now=T0 + 60))
    assert later.outcome == "new" and later.id != first.id and later.run_at == T0 + 60


async def test_throttle_delays_to_the_next_allowed_time_and_says_why(store):
    first = await one(store, throttle("delay"))
    second = await one(store, throttle("delay", now=T0 + 10))
    third = await one(store, throttle("delay", now=T0 + 20))
    assert [r.outcome for r in (first, second, third)] == ["new", "delayed", "delayed"]
    assert [r.run_at for r in (first, second, third)] == [T0, T0 + 60, T0 + 120]
    stored = await store.run_get(second.id)
    assert stored.waiting == WaitReason.THROTTLE and stored.run_at == T0 + 60
    wid = await store.worker_register(worker())
    assert [r.id for r in await store.run_claim(claim(wid, now=T0 + 30))] == [first.id]
    assert [r.id for r in await store.run_claim(claim(wid, now=T0 + 60))] == [second.id]


async def test_concurrent_throttle_submitters_make_one_run_in_a_period(store):
    results = await asyncio.gather(*(one(store, throttle(key="race")) for _ in range(8)))
    assert len({r.id for r in results}) == 1
    assert sorted(r.outcome for r in results) == ["dropped"] * 7 + ["new"]
