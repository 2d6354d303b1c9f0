"""A cancel reaches the whole family, children submitted while it is made included
(rules.born_cancelled), on every backend."""

from __future__ import annotations

import asyncio
import json

from runwright.errors import RunEnded
from runwright.runs import RunState
from runwright.store._params import EventListParams, RunCancelParams, RunFinishParams, RunInsertParams

from .helpers import T0, claim, insert, worker


def _child(parent_id: int, key: str | None = None, **kw) -> RunInsertParams:
    p = insert(key, **kw)
    p.parent_id = parent_id
    return p


async def _running_parent(store):
    wid = await store.worker_register(worker())
    (parent,) = await store.run_insert_many([insert()])
    (claimed,) = await store.run_claim(claim(wid))
    assert claimed.id == parent.id
    return wid, claimed


async def _assert_born_cancelled(store, returned) -> None:
    """`returned` (as the insert gave them) were born cancelled, and a read says the same."""
    read = {run.id: run for run in await store.run_get_many([r.id for r in returned])}
    for run in returned:
        assert run.state is RunState.CANCELLED, run
        assert run == read[run.id]
        assert run.finished_at == T0 and run.started_at is None and run.attempt == 0
        assert json.loads(run.error)["type"] == "Cancelled"
    events = await store.event_list(EventListParams(returned[0].id))
    assert [e.kind for e in events] == ["submitted", "cancelled"]
    assert [e.seq for e in events] == [1, 2]


async def test_a_child_of_a_run_with_a_cancel_requested_is_born_cancelled(store):
    wid, parent = await _running_parent(store)
    await store.run_cancel(RunCancelParams(parent.id, now=T0))
    assert (await store.run_get(parent.id)).cancel_requested
    (child,) = await store.run_insert_many([_child(parent.id)])
    await _assert_born_cancelled(store, [child])
    assert await store.run_claim(claim(wid)) == []


async def test_a_child_of_a_cancelled_run_is_born_cancelled_in_any_batch(store):
    """One child, a batch of fresh keys (PostgreSQL: one statement, and chunks past
    INSERT_CHUNK), keys checked, mixed with runs that are not affected."""
    wid = await store.worker_register(worker())
    (parent, other) = await store.run_insert_many([insert(), insert()])
    await store.run_cancel(RunCancelParams(parent.id, now=T0))
    assert (await store.run_get(parent.id)).state is RunState.CANCELLED
    (one,) = await store.run_insert_many([_child(parent.id)])
    await _assert_born_cancelled(store, [one])
    fresh = []
    for _ in range(450):
        p = _child(parent.id)
        p.key_is_fresh = True
        fresh.append(p)
    await _assert_born_cancelled(store, await store.run_insert_many(fresh))
    mixed = await store.run_insert_many([insert(), _child(parent.id), _child(other.id), _child(parent.id)])
    assert [r.state for r in mixed] == [RunState.QUEUED, RunState.CANCELLED, RunState.QUEUED,
                                        RunState.CANCELLED]
    await _assert_born_cancelled(store, [mixed[1], mixed[3]])
    claimed = await store.run_claim(claim(wid, limit=1000))
    assert sorted(r.id for r in claimed) == sorted([other.id, mixed[0].id, mixed[2].id])


async def test_a_threaded_child_of_a_cancelled_run_is_born_cancelled(store):
    _, parent = await _running_parent(store)
    await store.run_cancel(RunCancelParams(parent.id, now=T0))
    p = _child(parent.id)
    p.thread = "t1"
    child = await store.run_insert_threaded(p)
    await _assert_born_cancelled(store, [child])
    # Its thread is free again: the next run of it is claimable.
    nxt = insert()
    nxt.thread = "t1"
    assert (await store.run_insert_threaded(nxt)).state is RunState.QUEUED


async def test_children_of_other_parents_are_born_queued(store):
    """A running parent, one that ended otherwise, and a key that already named a run."""
    wid, running = await _running_parent(store)
    (done_parent,) = await store.run_insert_many([insert()])
    (done,) = await store.run_claim(claim(wid))
    await store.run_finish_many([RunFinishParams(done.id, done.fence, RunState.SUCCEEDED,
                                                 result="1", now=T0)])
    children = await store.run_insert_many([_child(running.id, "a"), _child(done_parent.id, "b")])
    assert [c.state for c in children] == [RunState.QUEUED, RunState.QUEUED]
    # Cancelling the parent now ends the existing child; submitting its key again
    # returns that run as it is, and a new key is born cancelled.
    await store.run_cancel(RunCancelParams(running.id, now=T0))
    again, new = await store.run_insert_many([_child(running.id, "a"), _child(running.id, "c")])
    assert again.existed and again.id == children[0].id and again.state is RunState.CANCELLED
    assert new.state is RunState.CANCELLED and not new.existed
    assert (await store.run_get(children[1].id)).state is RunState.QUEUED


async def test_a_cancel_of_a_large_family_cancels_every_member(store):
    wid, parent = await _running_parent(store)
    children = await store.run_insert_many([_child(parent.id) for _ in range(300)])
    running = await store.run_claim(claim(wid, limit=20))
    grandchildren = await store.run_insert_many([_child(r.id) for r in running for _ in range(3)])
    cancelled = await store.run_cancel(RunCancelParams(parent.id, now=T0))
    assert cancelled.state is RunState.RUNNING and cancelled.cancel_requested
    running_ids = {r.id for r in running}
    for run in await store.run_get_many([r.id for r in (*children, *grandchildren)]):
        if run.id in running_ids:
            assert run.state is RunState.RUNNING and run.cancel_requested
        else:
            assert run.state is RunState.CANCELLED, run
    assert await store.run_claim(claim(wid, limit=1000)) == []


async def _cancel(store, run_id: int) -> None:
    try:
        await store.run_cancel(RunCancelParams(run_id, now=T0))
    except RunEnded:  # the other cancel ended it first
        pass


async def test_overlapping_cancels_of_one_family_all_succeed(store, store_url):
    """A cancel of a parent and cancels of its parked children at once, from two stores
    (sessions): no deadlock reaches the caller (PostgreSQL: they lock in one order, and a
    conflict PostgreSQL rolled back is tried again), and the whole family ends cancelled."""
    from runwright.store import store_from_url

    other = store_from_url(store_url)
    await other.open(create=False)
    try:
        wid = await store.worker_register(worker())
        for _ in range(15):
            (parent,) = await store.run_insert_many([insert()])
            (claimed,) = await store.run_claim(claim(wid, limit=1))
            assert claimed.id == parent.id
            children = await store.run_insert_many([_child(parent.id) for _ in range(6)])
            await asyncio.gather(_cancel(store, parent.id),
                                 *[_cancel(other, c.id) for c in children[::-1]])
            ended = await store.run_get_many([c.id for c in children])
            assert {run.state for run in ended} == {RunState.CANCELLED}
            assert (await store.run_get(parent.id)).cancel_requested
    finally:
        await other.close()


async def test_a_cancel_gives_its_reason_to_the_event_and_the_error(store):
    """A steered run's follower is cancelled "delivered into run N" (agents/_steering.py):
    its event and its error say so; a cancel without a reason says "cancelled on request"."""
    (steered, plain) = await store.run_insert_many([insert(), insert()])
    await store.run_cancel(RunCancelParams(steered.id, now=T0, reason="delivered into run 7"))
    await store.run_cancel(RunCancelParams(plain.id, now=T0))
    for run_id, reason in ((steered.id, "delivered into run 7"), (plain.id, "cancelled on request")):
        run = await store.run_get(run_id)
        assert run.state is RunState.CANCELLED and json.loads(run.error)["message"] == reason
        events = await store.event_list(EventListParams(run_id))
        assert (events[-1].kind, events[-1].data) == ("cancelled", {"reason": reason})
