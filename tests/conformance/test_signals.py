"""Signals sent to a live run, and the waits that take them: the same on every backend."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from runwright.core._signals import taken_outcome
from runwright.errors import KeyConflict, RunEnded, RunNotFound, SignalsFull
from runwright.runs import RunState, WaitReason
from runwright.store import store_from_url
from runwright.store._hub import QUEUED, events_topic
from runwright.store._params import (
    EventListParams,
    RunFinishParams,
    RunReclaimParams,
    RunRescueParams,
    SignalListParams,
    SignalSendParams,
    SignalStartParams,
    SignalTakeParams,
    StepRecordParams,
)

from .helpers import T0, claim, insert, worker


async def _running(store, tenant: str | None = None):
    wid = await store.worker_register(worker())
    params = insert()
    params.tenant = tenant
    await store.run_insert_many([params])
    (claimed,) = await store.run_claim(claim(wid))
    return wid, claimed


def send(run_id: int, payload, name: str = "chat", key: str | None = None, tenant: str | None = None,
         max_pending: int = 1000, now: float = T0 + 2) -> SignalSendParams:
    return SignalSendParams(run_id, name, json.dumps(payload), key=key, by="ana", tenant=tenant,
                            max_pending=max_pending, now=now)


def take(run, position: int, name: str = "chat", now: float = T0 + 3) -> SignalTakeParams:
    return SignalTakeParams(run.id, run.fence, position, name, now=now)


async def _park(store, run, waits_on: WaitReason = WaitReason.SIGNAL, now: float = T0 + 1) -> None:
    """What the executor does when ctx.wait_signal raises Park: give the slot back for an hour."""
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=True, run_at=now + 3600, event_kind="parked",
        event_data='{"reason": "signal"}', waiting=waits_on, now=now)]) == []


async def kinds(store, run_id: int) -> list[str]:
    return [e.kind for e in await store.event_list(EventListParams(run_id, 0, 100))]


async def test_a_signal_sent_before_the_wait_is_kept_and_taken_once(store):
    _, run = await _running(store)
    sent = await store.signal_send(send(run.id, {"amount": 5}))
    assert (sent.seq, sent.name, sent.payload, sent.sent_by, sent.sent_at, sent.pending) == (
        1, "chat", {"amount": 5}, "ana", T0 + 2, True)
    taken = await store.signal_take(take(run, 4))
    assert taken.owned and taken.signal is not None
    assert (taken.signal.seq, taken.signal.payload, taken.signal.position, taken.signal.taken_at) == (
        1, {"amount": 5}, 4, T0 + 3)
    # The same wait again (a replay, or a crash before the journal entry): the same signal.
    again = await store.signal_take(take(run, 4, now=T0 + 9))
    assert again.signal == taken.signal
    # Another wait finds nothing: the signal was delivered once.
    assert (await store.signal_take(take(run, 5))).signal is None
    assert await store.signal_list(SignalListParams(run.id, pending=True)) == []
    assert await store.signal_list(SignalListParams(run.id)) == [taken.signal]


async def test_waits_take_signals_of_their_name_in_the_order_sent(store):
    _, run = await _running(store)
    for n, name in enumerate(["a", "b", "a", "b", "a"]):
        await store.signal_send(send(run.id, n, name=name))
    assert (await store.signal_take(take(run, 0, "b"))).signal.payload == 1
    assert (await store.signal_take(take(run, 1, "a"))).signal.payload == 0
    assert (await store.signal_take(take(run, 2, "a"))).signal.payload == 2
    pending = await store.signal_list(SignalListParams(run.id, pending=True))
    assert [(s.seq, s.name) for s in pending] == [(4, "b"), (5, "a")]
    assert [s.seq for s in await store.signal_list(SignalListParams(run.id, after=2, limit=2))] == [3, 4]


async def test_a_signal_wakes_a_run_parked_on_its_wait_at_once(store):
    wid, run = await _running(store)
    assert (await store.signal_take(take(run, 0, now=T0 + 0.5))).signal is None
    await _park(store, run)
    assert await store.run_claim(claim(wid, now=T0 + 2)) == []  # parked for an hour
    await store.signal_send(send(run.id, "hello", now=T0 + 2))
    (resumed,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert resumed.id == run.id and resumed.fence == run.fence + 1
    assert (await store.signal_take(take(resumed, 0))).signal.payload == "hello"
    assert (await kinds(store, run.id))[-3:] == ["parked", "signalled", "started"]


async def test_a_signal_to_a_parked_run_tells_the_workers_of_other_processes(store, store_url):
    """The run comes due at once, and workers elsewhere hear of due work (a send to a
    running run need not tell them: it has nothing for them to claim)."""
    _, run = await _running(store)
    await _park(store, run)
    other = store_from_url(store_url)
    await other.open()
    try:
        await other.listen(runs=False)  # as a worker listens
        with other.hub.watch(QUEUED) as queued:
            await store.signal_send(send(run.id, "hello", now=T0 + 2))
            await asyncio.wait_for(queued.wait(), 10)
    finally:
        await other.close()


@pytest.mark.parametrize("size", [10, 9000])
async def test_a_delivery_into_a_lingering_wait_reaches_the_process_of_the_wait(store, store_url, backend,
                                                                                 size):
    """The wait lingers in another process (another store); the send delivers into it and
    wakes it. A delivery whose entry fits a notification brings it along (PostgreSQL: the
    woken wait reads nothing), a larger one is read: either way the wait gets the entry
    its journal holds, commas, quotes and all."""
    if backend not in DELIVER_INTO_A_LINGERING_WAIT:
        pytest.skip("the store does not deliver into a lingering wait")
    _, run = await _running(store)
    waiting = store_from_url(store_url)
    await waiting.open()
    try:
        await waiting.listen()
        wait = SignalTakeParams(run.id, run.fence, 4, "chat", now=T0 + 3, step="signal:chat", linger=True)
        assert (await waiting.signal_take(wait)).lingering
        payload = {"text": "a, b, \"c\"", "pad": "x" * size}
        with waiting.hub.watch(events_topic(run.id)) as grown:
            await store.signal_send(send(run.id, payload))
            await asyncio.wait_for(grown.wait(), 10)
        told = waiting._lingering_here.get((run.id, run.fence, 4))  # type: ignore[attr-defined]
        assert (told is not None) == (size < 8000), "a notification carries what fits in one"
        looked = await waiting.signal_take(replace(wait, linger=False, peek=True))
        (entry,) = await store.step_list(run.id)
        assert looked.journaled == entry.result and json.loads(entry.result)["payload"] == payload
        assert looked.signal is not None and (looked.signal.payload, looked.signal.position) == (payload, 4)
    finally:
        await waiting.close()


async def test_a_signal_before_the_park_lands_still_wakes_the_run(store):
    wid, run = await _running(store)
    assert (await store.signal_take(take(run, 0, now=T0 + 0.5))).signal is None
    await store.signal_send(send(run.id, "early", now=T0 + 1))  # still running: its park is on its way
    await _park(store, run, now=T0 + 1.5)
    (resumed,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert resumed.id == run.id


async def test_a_signal_leaves_a_run_parked_on_another_wait_asleep(store):
    wid, run = await _running(store)
    await _park(store, run, waits_on=WaitReason.SLEEP)
    await store.signal_send(send(run.id, "later"))
    assert await store.run_claim(claim(wid, now=T0 + 2)) == []
    assert [s.payload for s in await store.signal_list(SignalListParams(run.id, pending=True))] == ["later"]


async def test_a_superseded_owner_cannot_take_a_signal(store):
    _, run = await _running(store)
    await store.signal_send(send(run.id, "x"))
    await store.run_rescue_many(RunRescueParams(now=T0 + 60, worker_stale_s=1e9))
    wid = await store.worker_register(worker())
    (retaken,) = await store.run_claim(claim(wid, now=T0 + 60))
    assert retaken.fence == run.fence + 1
    refused = await store.signal_take(take(run, 0, now=T0 + 61))
    assert not refused.owned and refused.signal is None
    assert [s.pending for s in await store.signal_list(SignalListParams(run.id))] == [True]
    assert (await store.signal_take(take(retaken, 0, now=T0 + 61))).signal.payload == "x"


# The stores that journal a wait's take in the write that takes it (SignalTakeParams.step),
# and those whose send delivers into a wait that lingers for it (SignalTakeParams.linger).
JOURNAL_THE_TAKE = {"postgres"}
DELIVER_INTO_A_LINGERING_WAIT = {"postgres"}


async def test_a_send_delivers_into_the_wait_that_lingers_for_it_where_the_store_can(store, backend):
    """A wait that lingers (its take found none) is registered; the next send of its name
    takes the oldest pending signal of that name into it and journals it, in the send's
    write, once: the woken wait reads it (peek), and its take there returns the same. A
    wait whose last take withdrew it, a run taken over since, or a position the journal
    holds already, is delivered nothing: the signal stays pending."""
    _, run = await _running(store)

    def wait(position: int, *, of=run, **flags: bool) -> SignalTakeParams:
        return SignalTakeParams(of.id, of.fence, position, "chat", now=T0 + 3, step="signal:chat", **flags)

    async def pending() -> list[int]:
        return [s.seq for s in await store.signal_list(SignalListParams(run.id, pending=True))]

    first = await store.signal_take(wait(2, linger=True))
    assert (first.owned, first.signal) == (True, None)
    if backend not in DELIVER_INTO_A_LINGERING_WAIT:
        assert not first.lingering
        return
    assert first.lingering
    other = await store.signal_send(send(run.id, "not for it", name="other"))
    sent = await store.signal_send(send(run.id, {"n": 1}))
    assert sent.pending, "returned as kept"
    looked = await store.signal_take(wait(2, peek=True))
    assert looked.signal is not None and (looked.signal.seq, looked.signal.position) == (sent.seq, 2)
    assert looked.journaled is not None and json.loads(looked.journaled) == taken_outcome(looked.signal)
    assert [(s.position, s.name, s.status, s.result) for s in await store.step_list(run.id)] == [
        (2, "signal:chat", "done", looked.journaled)]
    assert (await kinds(store, run.id))[-3:] == ["signalled", "signalled", "step"]
    again = await store.signal_take(wait(2))
    assert (again.signal, again.journaled) == (looked.signal, looked.journaled)
    # Delivered once: the next send stays pending, and the next wait takes it itself.
    later = await store.signal_send(send(run.id, {"n": 2}))
    assert await pending() == [other.seq, later.seq]
    assert (await store.signal_take(wait(3, linger=True))).signal.seq == later.seq
    # Withdrawn by the wait's last take: a woken peek finds one pending to take.
    assert (await store.signal_take(wait(4, linger=True))).lingering
    assert (await store.signal_take(wait(4))).signal is None
    withdrawn = await store.signal_send(send(run.id, {"n": 3}))
    assert await pending() == [other.seq, withdrawn.seq]
    assert not (await store.signal_take(wait(4, peek=True))).lingering, "one is pending: take it"
    assert (await store.signal_take(wait(4))).signal.seq == withdrawn.seq
    # A position the journal holds already (the wait's timeout, written meanwhile).
    assert (await store.signal_take(wait(5, linger=True))).lingering
    assert await store.step_record_many([StepRecordParams(run.id, run.fence, 5, "signal:chat", "done",
                                                          '{"timeout": true}', None)]) == [True]
    timed_out = await store.signal_send(send(run.id, {"n": 4}))
    assert await pending() == [other.seq, timed_out.seq]
    assert (await store.signal_take(wait(6))).signal.seq == timed_out.seq
    # A run taken over since its wait lingered.
    assert (await store.signal_take(wait(7, linger=True))).lingering
    await store.run_rescue_many(RunRescueParams(now=T0 + 60, worker_stale_s=1e9))
    (retaken,) = await store.run_claim(claim(await store.worker_register(worker()), now=T0 + 60))
    stale = await store.signal_send(send(run.id, {"n": 5}))
    assert await pending() == [other.seq, stale.seq]
    assert not (await store.signal_take(wait(7, peek=True))).owned
    assert (await store.signal_take(wait(7, of=retaken))).signal.seq == stale.seq


async def test_a_take_journals_the_wait_in_its_own_write_where_the_store_can(store, backend):
    """Where the store journals the take, the entry is the one the wait would write
    (taken_outcome, to the last bit of its float), logged as any step; a take again at
    that position (a retry whose reply was lost) returns it and writes nothing more; a
    take that finds none, or whose fence is refused, writes no entry. Elsewhere the take
    journals nothing and the wait writes the entry."""
    _, run = await _running(store)
    sent_at = T0 + 2.123456789012345  # a float with every digit of a double used
    await store.signal_send(send(run.id, {"amount": 5.25, "note": "é"}, now=sent_at))

    def for_wait(position: int, name: str = "chat", fence: int = run.fence) -> SignalTakeParams:
        return SignalTakeParams(run.id, fence, position, name, now=T0 + 3, step=f"signal:{name}")

    none = await store.signal_take(for_wait(3, "other"))
    assert (none.owned, none.signal, none.journaled) == (True, None, None)
    refused = await store.signal_take(for_wait(3, fence=run.fence + 1))
    assert (refused.owned, refused.signal, refused.journaled) == (False, None, None)
    assert await store.step_list(run.id) == []
    logged = await kinds(store, run.id)

    taken = await store.signal_take(for_wait(3))
    assert taken.signal is not None and taken.signal.sent_at == sent_at
    journal = await store.step_list(run.id)
    if backend not in JOURNAL_THE_TAKE:
        assert taken.journaled is None and journal == []
        return
    assert taken.journaled is not None
    assert json.loads(taken.journaled) == taken_outcome(taken.signal)
    assert json.loads(taken.journaled)["sent_at"] == sent_at
    assert [(s.position, s.name, s.status, s.result, s.fence) for s in journal] == [
        (3, "signal:chat", "done", taken.journaled, run.fence)]
    assert await kinds(store, run.id) == [*logged, "step"]
    again = await store.signal_take(for_wait(3))
    assert (again.signal, again.journaled) == (taken.signal, taken.journaled)
    assert await store.step_list(run.id) == journal
    assert await kinds(store, run.id) == [*logged, "step"], "the retry logged nothing"


async def test_an_ended_run_takes_no_signal_and_nothing_is_kept(store):
    _, run = await _running(store)
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 1)]) == []
    with pytest.raises(RunEnded, match="ended succeeded"):
        await store.signal_send(send(run.id, "late"))
    assert await store.signal_list(SignalListParams(run.id)) == []
    assert "signalled" not in await kinds(store, run.id)


async def test_a_key_keeps_one_signal_and_refuses_another_under_it(store):
    _, run = await _running(store)
    first = await store.signal_send(send(run.id, {"paid": 10}, key="pay-1"))
    assert await store.signal_send(send(run.id, {"paid": 10}, key="pay-1", now=T0 + 9)) == first
    with pytest.raises(KeyConflict, match="pay-1"):
        await store.signal_send(send(run.id, {"paid": 11}, key="pay-1"))
    assert len(await store.signal_list(SignalListParams(run.id))) == 1
    assert (await kinds(store, run.id)).count("signalled") == 1


async def test_pending_signals_are_capped_and_a_take_makes_room(store):
    _, run = await _running(store)
    for n in range(2):
        await store.signal_send(send(run.id, n, max_pending=2))
    with pytest.raises(SignalsFull, match="2 signals not yet taken"):
        await store.signal_send(send(run.id, 2, max_pending=2))
    assert len(await store.signal_list(SignalListParams(run.id))) == 2
    await store.signal_take(take(run, 0))
    assert (await store.signal_send(send(run.id, 2, max_pending=2))).seq == 3


async def test_a_signal_is_scoped_by_tenant_and_its_event_carries_no_payload(store):
    _, run = await _running(store, tenant="acme")
    with pytest.raises(RunNotFound):
        await store.signal_send(send(run.id, "x", tenant="other"))
    with pytest.raises(RunNotFound):
        await store.signal_list(SignalListParams(run.id, tenant="other"))
    with pytest.raises(RunNotFound):
        await store.signal_send(send(run.id + 1000, "x"))
    await store.signal_send(send(run.id, {"secret": 1}, tenant="acme"))
    (event,) = [e for e in await store.event_list(EventListParams(run.id, 0, 100)) if e.kind == "signalled"]
    assert event.data == {"signal": 1, "name": "chat", "by": "ana"}


async def test_signal_with_start_inserts_the_run_with_its_signal_or_writes_nothing(store):
    params = insert(key="order-7")
    run, signal = await store.signal_start(SignalStartParams(params, send(0, "first")))
    assert not run.existed and run.state is RunState.QUEUED
    assert signal is not None and (signal.run_id, signal.seq, signal.payload) == (run.id, 1, "first")
    again, none = await store.signal_start(SignalStartParams(insert(key="order-7"), send(0, "second")))
    assert again.existed and again.id == run.id and none is None
    assert [s.payload for s in await store.signal_list(SignalListParams(run.id))] == ["first"]
    assert await kinds(store, run.id) == ["submitted", "signalled"]


async def test_retention_removes_a_runs_signals_with_it(store):
    _, run = await _running(store)
    await store.signal_send(send(run.id, "kept", key="k"))
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1",
                                                 now=T0 + 3)])
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))).run_ids == [run.id]
    with pytest.raises(RunNotFound):
        await store.signal_list(SignalListParams(run.id))
    if store.url.startswith("redis"):
        left = [k async for k in store.redis.scan_iter(store.key(f"sig*:{run.id}*"))]
        assert left == []


async def test_a_withdrawn_signal_is_kept_marked_and_never_taken(store):
    _, run = await _running(store)
    first = await store.signal_send(send(run.id, "give up", key="u1"))
    second = await store.signal_send(send(run.id, "keep"))
    assert await store.signal_withdraw(run.id, first.seq)
    assert not await store.signal_withdraw(run.id, first.seq), "withdrawn once"
    assert (await store.signal_take(take(run, 0))).signal.seq == second.seq
    assert not await store.signal_withdraw(run.id, second.seq), "a taken signal stays taken"
    listed = await store.signal_list(SignalListParams(run.id))
    assert [(s.seq, s.pending, s.withdrawn_at is not None, s.position) for s in listed] == [
        (1, False, True, None), (2, False, False, 0)]
    third = await store.signal_send(send(run.id, "later"))
    assert third.seq == 3, "a number is never given twice"
    assert "withdrawn" in await kinds(store, run.id)
