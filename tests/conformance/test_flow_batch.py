"""Store scenarios for batching per key (tasks._flow.Batch, store._flow_rules): the
submissions of one key collected into one queued run of up to max_items, due max_wait_s
after the first, or now once full; decided by the store in the insert, under the key's
lock. Each runs on every backend."""

from __future__ import annotations

import asyncio
import json

from runwright.runs import RunState
from runwright.store._params import RunInsertParams

from .helpers import T0, worker
from .test_flow_control import claim, one

_n = iter(range(1_000_000))


def batched(item: object, key: str = "order-1", most: int = 3, wait_s: float = 5.0, *,
            now: float = T0) -> RunInsertParams:
    """One submission of a batch, as tasks._submission makes it: the run's arguments the
    list of its one item, an append for a merge and a count of the items held."""
    params = RunInsertParams(key=f"batch{next(_n)}", task="t", args=json.dumps({"items": [item]}), now=now,
                             key_is_fresh=True, flow=json.dumps(["batch", "orders", key, str(most), wait_s]))

    def append(standing: str, new: str) -> str:
        return json.dumps({"items": json.loads(standing)["items"] + json.loads(new)["items"]})

    params.merge = append
    params.items = lambda stored: len(json.loads(stored)["items"])
    return params


def items(run) -> list:
    return run.arguments()["items"]


async def test_a_batch_collects_submissions_until_it_is_full_then_is_due_at_once(store):
    first = await one(store, batched(1))
    assert first.outcome == "new" and first.run_at == T0 + 5, "due max_wait_s after the first"
    second = await one(store, batched(2, now=T0 + 1))
    assert second.id == first.id and second.outcome == "batched"
    assert items(second) == [1, 2] and second.run_at == T0 + 5, "joining leaves the due time"
    third = await one(store, batched(3, now=T0 + 2))
    assert third.id == first.id and third.outcome == "batched"
    stored = await store.run_get(first.id)
    assert items(stored) == [1, 2, 3] and stored.run_at == T0 + 2, "the one that fills it makes it due now"
    fourth = await one(store, batched(4, now=T0 + 3))
    assert fourth.outcome == "new" and fourth.id != first.id and items(fourth) == [4]
    assert fourth.run_at == T0 + 8, "a full batch takes no more: the next opens a new one"
    assert items(await store.run_get(first.id)) == [1, 2, 3]
    other = await one(store, batched("x", key="order-2", now=T0 + 3))
    assert other.outcome == "new" and other.id not in (first.id, fourth.id), "another key, another batch"


async def test_a_batch_that_started_takes_no_more_items(store):
    first = await one(store, batched(1))
    wid = await store.worker_register(worker())
    (running,) = await store.run_claim(claim(wid, now=T0 + 5))
    assert running.id == first.id and items(running) == [1]
    after = await one(store, batched(2, now=T0 + 6))
    assert after.outcome == "new" and after.id != first.id and after.run_at == T0 + 11
    assert items(await store.run_get(first.id)) == [1], "a running batch is never written to"
    assert (await store.run_get(first.id)).state is RunState.RUNNING


async def test_a_batch_of_one_is_due_at_once(store):
    runs = [await one(store, batched(i, most=1, now=T0 + i)) for i in range(3)]
    assert [r.outcome for r in runs] == ["new"] * 3 and len({r.id for r in runs}) == 3
    assert [r.run_at for r in runs] == [T0, T0 + 1, T0 + 2] and [items(r) for r in runs] == [[0], [1], [2]]


async def test_concurrent_batch_submitters_put_each_item_in_exactly_one_run(store):
    results = await asyncio.gather(*(one(store, batched(i, key="race", most=4)) for i in range(22)))
    runs = {r.id: await store.run_get(r.id) for r in results}
    held = {run_id: items(run) for run_id, run in runs.items()}
    assert sorted(i for got in held.values() for i in got) == list(range(22)), f"lost or doubled: {held}"
    assert all(len(got) <= 4 for got in held.values()), f"a batch over max_items: {held}"
    assert sorted(len(got) for got in held.values()) == [2, 4, 4, 4, 4, 4], held
    for i, answer in enumerate(results):
        assert i in held[answer.id], f"item {i} was answered with run {answer.id}, which lacks it"
    assert sorted(r.outcome for r in results).count("new") == 6


async def test_one_write_of_many_submissions_batches_them_in_order(store):
    """A submit_many's items of one key, in one write: each decided on what the one
    before it did."""
    runs = await store.run_insert_many([batched(i) for i in range(5)])
    assert [r.outcome for r in runs] == ["new", "batched", "batched", "new", "batched"]
    first, second = runs[0].id, runs[3].id
    assert [r.id for r in runs] == [first, first, first, second, second]
    assert items(await store.run_get(first)) == [0, 1, 2] and items(await store.run_get(second)) == [3, 4]
    assert (await store.run_get(first)).run_at == T0 and (await store.run_get(second)).run_at == T0 + 5
