"""Threads in the store: busy policies, one open run at a time, history, deletion."""

from __future__ import annotations

import json

import pytest

from runwright.errors import ThreadBusy, ThreadDeleted
from runwright.runs import RunState
from runwright.store._params import (
    EventListParams,
    RunCountParams,
    RunFinishParams,
    RunInsertParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadForgetParams,
    ThreadMessagesParams,
)

from .helpers import T0, claim, worker


def threaded(key: str, on_busy: str, thread: str = "t1") -> RunInsertParams:
    return RunInsertParams(key=key, task="t", args="{}", thread=thread, on_busy=on_busy, now=T0)


async def test_reject_refuses_a_busy_thread_and_stores_nothing(store):
    first = await store.run_insert_threaded(threaded("a", "reject"))
    with pytest.raises(ThreadBusy, match=f"busy with run {first.id}"):
        await store.run_insert_threaded(threaded("b", "reject"))
    assert await store.run_count_by_state(RunCountParams()) == {"queued": 1}
    again = await store.run_insert_threaded(threaded("a", "reject"))  # same key: not "busy"
    assert again.existed and again.id == first.id


async def test_enqueued_runs_of_a_thread_never_overlap(store):
    wid = await store.worker_register(worker())
    first = await store.run_insert_threaded(threaded("a", "enqueue"))
    second = await store.run_insert_threaded(threaded("b", "enqueue"))
    other = await store.run_insert_threaded(threaded("c", "enqueue", thread="t2"))
    claimed = await store.run_claim(claim(wid, limit=10))
    assert sorted(r.id for r in claimed) == [first.id, other.id]  # `second` waits for `first`
    done = next(r for r in claimed if r.id == first.id)
    await store.run_finish_many([
        RunFinishParams(done.id, done.fence, RunState.SUCCEEDED, result="1", now=T0)])
    assert [r.id for r in await store.run_claim(claim(wid, limit=10))] == [second.id]


async def _run_alone(store, wid: int, expected_id: int, say: str | None = None,
                     state: RunState = RunState.SUCCEEDED):
    """Claim the thread's next run (it must be `expected_id`, and the only one), let it
    add `say` to the thread, and end it."""
    claimed = await store.run_claim(claim(wid, limit=10))
    assert [r.id for r in claimed] == [expected_id]
    (run,) = claimed
    if say is not None:
        assert await store.thread_append(ThreadAppendParams(run.id, run.fence, "t1", 0, json.dumps(say)))
    await store.run_finish_many([RunFinishParams(run.id, run.fence, state, result="1", now=T0)])
    return run


@pytest.mark.parametrize("mode", ["interrupt", "rollback"])
async def test_an_interrupt_goes_ahead_of_the_waiting_runs_which_run_after_it_in_order(store, mode):
    """Seed 002: the interrupting message is queued ahead of the thread's waiting runs; the
    running run stops at its next step boundary and ends `interrupted`; the new message
    runs next, and the runs already waiting run after it, in their order, untouched."""
    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("r1", "enqueue"))
    (running,) = await store.run_claim(claim(wid))
    assert await store.thread_append(ThreadAppendParams(running.id, running.fence, "t1", 0, '"r1"'))
    waiting = [await store.run_insert_threaded(threaded(key, "enqueue")) for key in ("e1", "e2")]
    newest = await store.run_insert_threaded(threaded("i", mode))

    assert (await store.run_get(running.id)).interrupt == mode
    assert (await store.run_get(running.id)).state is RunState.RUNNING
    for run in waiting:  # untouched: queued, not asked to stop, nothing logged
        now = await store.run_get(run.id)
        assert now.state is RunState.QUEUED and now.interrupt is None
        assert [e.kind for e in await store.event_list(EventListParams(run.id))] == ["submitted"]
    assert await store.run_claim(claim(wid, limit=10)) == []  # the running one holds the thread

    # It stops at its boundary (a rollback drops its additions first, as the engine does).
    if mode == "rollback":
        assert await store.thread_forget_run(ThreadForgetParams(running.id, running.fence))
    await store.run_finish_many([RunFinishParams(running.id, running.fence, RunState.INTERRUPTED, now=T0)])
    assert (await store.run_get(running.id)).state is RunState.INTERRUPTED

    order = [await _run_alone(store, wid, newest.id, "i")]
    order += [await _run_alone(store, wid, run.id, key) for run, key in zip(waiting, ("e1", "e2"))]
    assert [run.id for run in order] == [newest.id, waiting[0].id, waiting[1].id]
    for run in waiting:
        assert (await store.run_get(run.id)).state is RunState.SUCCEEDED

    # The history is in the order the runs took their turns; each run read what came before.
    kept = [] if mode == "rollback" else ["r1"]
    history = await store.thread_messages(ThreadMessagesParams("t1"))
    assert [json.loads(m) for _, _, m in history] == [*kept, "i", "e1", "e2"]
    before_e1 = await store.thread_messages(ThreadMessagesParams("t1", before_run=waiting[0].id))
    assert [json.loads(m) for _, _, m in before_e1] == [*kept, "i"]
    before_i = await store.thread_messages(ThreadMessagesParams("t1", before_run=newest.id))
    assert [json.loads(m) for _, _, m in before_i] == kept


async def test_each_newer_interrupt_goes_next_and_a_begun_run_between_attempts_ends_now(store):
    """A second interrupt while the first still waits goes ahead of it too (the newest
    message is answered next); a run that had begun and waits between attempts (parked,
    backing off) is the thread's current run: it ends `interrupted` at once."""
    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("p", "enqueue"))
    (parked,) = await store.run_claim(claim(wid))
    await store.run_finish_many([RunFinishParams(parked.id, parked.fence, RunState.QUEUED,
                                                 run_at=T0 + 3600, release=True, now=T0)])
    waiting = await store.run_insert_threaded(threaded("e1", "enqueue"))
    first = await store.run_insert_threaded(threaded("i1", "interrupt"))
    ended = await store.run_get(parked.id)
    assert ended.state is RunState.INTERRUPTED and ended.interrupt == "interrupt"
    second = await store.run_insert_threaded(threaded("i2", "interrupt"))
    for run in (waiting, first):
        assert (await store.run_get(run.id)).state is RunState.QUEUED
    for run in (second, first, waiting):
        await _run_alone(store, wid, run.id)
    assert await store.run_claim(claim(wid, limit=10)) == []


async def test_an_interrupt_of_a_thread_with_nothing_waiting_runs_after_the_running_one(store):
    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("a", "enqueue"))
    (running,) = await store.run_claim(claim(wid))
    newest = await store.run_insert_threaded(threaded("c", "interrupt"))
    assert (await store.event_list(EventListParams(running.id)))[-1].kind == "interrupt_requested"
    assert await store.run_claim(claim(wid)) == []
    await store.run_finish_many([RunFinishParams(running.id, running.fence, RunState.INTERRUPTED, now=T0)])
    assert [r.id for r in await store.run_claim(claim(wid))] == [newest.id]


async def test_history_is_ordered_fenced_and_rolled_back_per_run(store):
    wid = await store.worker_register(worker())
    first = await store.run_insert_threaded(threaded("a", "enqueue"))
    (first,) = await store.run_claim(claim(wid))
    for idx, text in enumerate(["hi", "hello"]):
        assert await store.thread_append(ThreadAppendParams(first.id, first.fence, "t1", idx,
                                                            json.dumps(text), now=T0))
    assert await store.thread_append(ThreadAppendParams(first.id, first.fence, "t1", 0, '"dup"'))
    assert not await store.thread_append(ThreadAppendParams(first.id, first.fence + 1, "t1", 2, '"x"'))
    await store.run_finish_many([
        RunFinishParams(first.id, first.fence, RunState.SUCCEEDED, result="1", now=T0)])
    second = await store.run_insert_threaded(threaded("b", "enqueue"))
    (second,) = await store.run_claim(claim(wid))
    await store.thread_append(ThreadAppendParams(second.id, second.fence, "t1", 0, '"again"'))
    history = await store.thread_messages(ThreadMessagesParams("t1"))
    assert [(run_id, idx, json.loads(m)) for run_id, idx, m in history] == [
        (first.id, 0, "hi"), (first.id, 1, "hello"), (second.id, 0, "again")]
    assert len(await store.thread_messages(ThreadMessagesParams("t1", before_run=second.id))) == 2
    assert await store.thread_forget_run(ThreadForgetParams(second.id, second.fence))
    assert len(await store.thread_messages(ThreadMessagesParams("t1"))) == 2


async def test_rollback_of_a_queued_run_drops_its_additions_and_a_deleted_thread_is_gone(store):
    await store.run_insert_threaded(threaded("a", "enqueue"))
    assert await store.thread_delete(ThreadDeleteParams("t1", purge=True))
    with pytest.raises(ThreadDeleted):
        await store.thread_messages(ThreadMessagesParams("t1"))
    with pytest.raises(ThreadDeleted):
        await store.run_insert_threaded(threaded("z", "enqueue"))
    assert not await store.thread_delete(ThreadDeleteParams("never-made", purge=True))


@pytest.mark.parametrize("round_", range(3))
async def test_concurrent_submissions_take_their_places_and_run_one_at_a_time(store, round_):
    """Twenty submissions race onto a thread whose run is running (many connections at
    once, enqueue and interrupt mixed). Each takes its place as it is serialized on the
    thread, which its id shows: an enqueue goes last, an interrupt first, ahead of every
    run waiting then. Drained one claim at a time, the thread runs exactly that order,
    one run at a time; only the running run is interrupted."""
    import asyncio
    import random
    from collections import deque

    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded(f"r{round_}", "enqueue"))
    (running,) = await store.run_claim(claim(wid))
    modes = [random.choice(["enqueue", "interrupt"]) for _ in range(20)]
    submitted = await asyncio.gather(*[
        store.run_insert_threaded(threaded(f"s{round_}-{i}", mode)) for i, mode in enumerate(modes)])
    expected: deque[int] = deque()
    for run, mode in sorted(zip(submitted, modes), key=lambda pair: pair[0].id):
        expected.appendleft(run.id) if mode == "interrupt" else expected.append(run.id)

    assert await store.run_claim(claim(wid, limit=10)) == []
    state = RunState.INTERRUPTED if "interrupt" in modes else RunState.SUCCEEDED
    await store.run_finish_many([RunFinishParams(running.id, running.fence, state, result="1", now=T0)])
    for run_id in expected:
        await _run_alone(store, wid, run_id)
    assert await store.run_claim(claim(wid, limit=10)) == []
    for run in submitted:
        assert (await store.run_get(run.id)).state is RunState.SUCCEEDED


async def test_retention_keeps_the_newest_messages_in_the_historys_order(store):
    """The history is in the order the runs took their turns: a run that went ahead of
    a waiting one is older in it than that run, whatever their ids, so a trim to the
    newest messages keeps the waiting run's, not the interrupting run's."""
    from runwright.store._params import ThreadMessageTrimParams

    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("r", "enqueue"))
    (running,) = await store.run_claim(claim(wid))
    waiting = await store.run_insert_threaded(threaded("e", "enqueue"))
    newest = await store.run_insert_threaded(threaded("i", "interrupt"))
    await store.run_finish_many([RunFinishParams(running.id, running.fence, RunState.INTERRUPTED, now=T0)])
    await _run_alone(store, wid, newest.id, "i")
    await _run_alone(store, wid, waiting.id, "e")
    await store.thread_message_trim(ThreadMessageTrimParams(keep=1))
    assert [json.loads(m) for _, _, m in await store.thread_messages(ThreadMessagesParams("t1"))] == ["e"]
