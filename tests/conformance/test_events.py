"""Events awaited by key: wait registrations, and publishes that deliver to them as
signals, the same on every backend."""

from __future__ import annotations

import json
import time

import pytest

from runwright.core._clock import Clock
from runwright.core._events import wait_signal_name
from runwright.engine._sweeper import Retention, Sweeper
from runwright.errors import KeyConflict
from runwright.runs import RunState, WaitReason
from runwright.store._event_params import (
    EventPublishParams,
    EventReclaimParams,
    EventWaitCloseParams,
    EventWaitListParams,
    EventWaitParams,
)
from runwright.store._params import (
    EventListParams,
    RunFinishParams,
    RunReclaimParams,
    RunRescueParams,
    SignalListParams,
    SignalTakeParams,
)

from .helpers import T0, claim, insert, worker
from .test_signals import _park


async def _running(store, n: int = 1, tenant: str | None = None):
    wid = await store.worker_register(worker())
    batch = []
    for _ in range(n):
        params = insert()
        params.tenant = tenant
        batch.append(params)
    await store.run_insert_many(batch)
    claimed = []
    while len(claimed) < n:
        claimed += await store.run_claim(claim(wid, limit=1000))
    return wid, claimed


def wait(run, position: int = 0, name: str = "doc.processed", match=None, now: float = T0 + 1):
    return EventWaitParams(run.id, run.fence, position, name, json.dumps(match or {}), run.tenant, now=now)


def publish(data, name: str = "doc.processed", id: str = "e1", tenant: str | None = None,
            max_pending: int = 1000, now: float = T0 + 2) -> EventPublishParams:
    return EventPublishParams(id, name, json.dumps(data), by="ana", tenant=tenant, max_pending=max_pending,
                              now=now)


def take(run, position: int = 0, now: float = T0 + 3) -> SignalTakeParams:
    return SignalTakeParams(run.id, run.fence, position, wait_signal_name(position), now=now)


async def states(store, run) -> list[str]:
    return [w.state for w in await store.event_wait_list(EventWaitListParams(run.id))]


async def test_a_wait_registered_then_matched_is_delivered_its_data_as_a_signal(store):
    _, (run,) = await _running(store)
    assert await store.event_wait(wait(run, 3, match={"doc_id": 7, "meta.lang": "fr"}))
    # Registered once: a replay's registration changes nothing.
    assert await store.event_wait(wait(run, 3, match={"doc_id": 7, "meta.lang": "fr"}, now=T0 + 9))
    (registered,) = await store.event_wait_list(EventWaitListParams(run.id))
    assert (registered.position, registered.name, registered.match, registered.state,
            registered.registered_at) == (3, "doc.processed", {"doc_id": 7, "meta.lang": "fr"}, "waiting",
                                          T0 + 1)
    data = {"doc_id": 7, "meta": {"lang": "fr"}, "pages": 3}
    published = await store.event_publish(publish(data))
    assert (published.id, published.woken, published.full, published.existed) == ("e1", [run.id], [], False)
    taken = await store.signal_take(take(run, 3))
    assert taken.signal is not None and taken.signal.payload == data
    assert (taken.signal.name, taken.signal.key, taken.signal.sent_by) == ("event:3", "event:e1:3", "ana")
    assert await states(store, run) == ["delivered"]
    assert (await store.event_wait_list(EventWaitListParams(run.id)))[0].event_id == "e1"
    # Delivered: a second event that fits finds no wait, and fills nothing.
    again = await store.event_publish(publish(data, id="e2"))
    assert again.woken == []
    assert len(await store.signal_list(SignalListParams(run.id))) == 1


async def test_an_event_that_does_not_fit_is_ignored(store):
    _, (run,) = await _running(store)
    await store.event_wait(wait(run, match={"doc_id": 7}))
    for n, data in enumerate([{"doc_id": 8}, {"other": 7}, {"doc_id": "7"}, [7], {"doc_id": True}]):
        assert (await store.event_publish(publish(data, id=f"no-{n}"))).woken == []
    other_name = publish({"doc_id": 7}, name="doc.deleted", id="other-name")
    assert (await store.event_publish(other_name)).woken == []
    assert await store.signal_list(SignalListParams(run.id)) == []
    assert await states(store, run) == ["waiting"]
    assert (await store.event_publish(publish({"doc_id": 7.0}, id="yes"))).woken == [run.id]


async def test_an_event_published_before_the_wait_is_not_delivered_to_it(store):
    _, (run,) = await _running(store)
    assert (await store.event_publish(publish({"doc_id": 1}))).woken == []
    await store.event_wait(wait(run))
    assert (await store.signal_take(take(run))).signal is None
    assert await states(store, run) == ["waiting"]


async def test_a_superseded_owner_cannot_register_nor_close(store):
    _, (run,) = await _running(store)
    await store.run_rescue_many(RunRescueParams(now=T0 + 60, worker_stale_s=1e9))
    wid = await store.worker_register(worker())
    (retaken,) = await store.run_claim(claim(wid, now=T0 + 60))
    assert not await store.event_wait(wait(run))
    assert await store.event_wait_list(EventWaitListParams(run.id)) == []
    assert await store.event_wait(wait(retaken))
    assert not await store.event_wait_close(EventWaitCloseParams(run.id, run.fence, 0))
    assert await states(store, run) == ["waiting"]


async def test_a_closed_wait_and_an_ended_runs_wait_no_longer_match(store):
    _, (closing, ending) = await _running(store, 2)
    await store.event_wait(wait(closing))
    await store.event_wait(wait(ending))
    assert await store.event_wait_close(EventWaitCloseParams(closing.id, closing.fence, 0))
    assert await states(store, closing) == ["closed"]
    assert await store.run_finish_many([RunFinishParams(ending.id, ending.fence, RunState.FAILED,
                                                        error='{"type": "X"}', now=T0 + 1)]) == []
    assert (await store.event_publish(publish({}))).woken == []
    assert await store.signal_list(SignalListParams(closing.id)) == []
    assert await store.signal_list(SignalListParams(ending.id)) == []


async def test_the_same_event_id_delivers_once_and_another_body_under_it_conflicts(store):
    _, (run,) = await _running(store)
    await store.event_wait(wait(run, 0))
    first = await store.event_publish(publish({"doc_id": 1}))
    await store.event_wait(wait(run, 1))  # a second wait, after: the same id delivers nothing to it
    again = await store.event_publish(publish({"doc_id": 1}, now=T0 + 5))
    assert (again.woken, again.existed) == (first.woken, True) == ([run.id], True)
    assert [s.name for s in await store.signal_list(SignalListParams(run.id))] == ["event:0"]
    assert await states(store, run) == ["delivered", "waiting"]
    with pytest.raises(KeyConflict, match="e1"):
        await store.event_publish(publish({"doc_id": 2}))
    kinds = [e.kind for e in await store.event_list(EventListParams(run.id, 0, 100))]
    assert kinds.count("signalled") == 1


async def test_an_event_is_scoped_by_tenant(store):
    _, (acme,) = await _running(store, tenant="acme")
    _, (own,) = await _running(store)
    await store.event_wait(wait(acme))
    await store.event_wait(wait(own))
    assert (await store.event_publish(publish({}, tenant="other"))).woken == []
    assert (await store.event_publish(publish({}, id="e1"))).woken == [own.id]  # the operator's: no tenant
    # Ids are per tenant: acme's e1 is its own.
    assert (await store.event_publish(publish({}, tenant="acme"))).woken == [acme.id]


async def test_a_full_run_is_not_delivered_to_and_its_wait_keeps_waiting(store):
    _, (run,) = await _running(store)
    await store.event_wait(wait(run))
    published = await store.event_publish(publish({}, max_pending=0))
    assert (published.woken, published.full) == ([], [run.id])
    assert await states(store, run) == ["waiting"]


async def test_a_publish_wakes_a_run_parked_on_its_wait(store):
    wid, (run,) = await _running(store)
    await store.event_wait(wait(run))
    await _park(store, run, waits_on=WaitReason.SIGNAL)
    assert await store.run_claim(claim(wid, now=T0 + 2)) == []
    await store.event_publish(publish({"x": 1}, now=T0 + 2))
    (resumed,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert resumed.id == run.id
    assert (await store.signal_take(take(resumed))).signal.payload == {"x": 1}


async def test_retention_removes_a_runs_waits_with_it(store):
    _, (run,) = await _running(store)
    await store.event_wait(wait(run, 0))
    await store.event_wait(wait(run, 1, name="other"))
    await store.event_publish(publish({}))
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1",
                                                 now=T0 + 3)])
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))).run_ids == [run.id]
    assert await store.event_wait_list(EventWaitListParams(run.id)) == []
    if store.url.startswith("redis"):
        # evw:<id> and the waiting hashes (evwaiting:..., gone once empty).
        left = [k async for k in store.redis.scan_iter(store.key("evw*"))]
        assert left == []
    else:
        async with store._reading() as conn:
            assert await conn.fetchval("SELECT count(*) FROM signals WHERE run_id = $1", run.id) == 0


async def test_retention_forgets_event_ids_past_its_age_and_the_id_is_new_again(store):
    _, (run,) = await _running(store)
    await store.event_publish(publish({}, id="old", now=T0 + 2))
    await store.event_publish(publish({}, id="recent", now=T0 + 50))
    assert await store.event_reclaim(EventReclaimParams(100, now=T0 + 101)) == 0
    assert await store.event_reclaim(EventReclaimParams(100, now=T0 + 103)) == 1
    await store.event_wait(wait(run))
    assert (await store.event_publish(publish({}, id="recent", now=T0 + 104))).existed
    again = await store.event_publish(publish({"other": "data"}, id="old", now=T0 + 104))
    assert (again.existed, again.woken) == (False, [run.id]), "a forgotten id is a new event"


async def test_the_sweeper_forgets_event_ids_as_old_as_the_runs_it_removes(store):
    await store.event_publish(publish({}, id="old", now=time.time() - 700))
    await store.event_publish(publish({}, id="young", now=time.time() - 10))
    sweeper = Sweeper(store, Clock(), Retention(max_age_s=600), holder="sweeper", lease_s=60)
    await sweeper.sweep(dry_run=True)
    assert (await store.event_publish(publish({}, id="old"))).existed, "a dry run forgets nothing"
    await sweeper.sweep()
    assert not (await store.event_publish(publish({}, id="old"))).existed
    assert (await store.event_publish(publish({}, id="young"))).existed


async def test_an_event_matching_1000_waiting_runs_wakes_each_exactly_once(store, backend, capsys):
    wid, runs = await _running(store, 1000)
    for run in runs:
        assert await store.event_wait(wait(run, 2, match={"batch": "b1"}))
        await _park(store, run, now=T0 + 1)
    started = time.perf_counter()
    published = await store.event_publish(publish({"batch": "b1", "n": 1}, now=T0 + 2))
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(f"\n[events] {backend}: publish to 1000 matched waits took {elapsed * 1000:.0f} ms")
    assert sorted(published.woken) == sorted(run.id for run in runs)
    assert published.full == []
    for run in runs:
        (signal,) = await store.signal_list(SignalListParams(run.id))
        assert (signal.name, signal.payload) == ("event:2", {"batch": "b1", "n": 1})
    # Each is due now: one claim takes them all back.
    resumed = []
    while batch := await store.run_claim(claim(wid, limit=1000, now=T0 + 2)):
        resumed += batch
    assert sorted(r.id for r in resumed) == sorted(run.id for run in runs)
    assert (await store.event_publish(publish({"batch": "b1"}, id="e2", now=T0 + 3))).woken == []
