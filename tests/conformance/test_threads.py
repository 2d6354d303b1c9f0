"""Threads in the store: busy policies, one open run at a time, history, deletion."""

from __future__ import annotations

import json

import pytest

from runwright.errors import ThreadBusy, ThreadDeleted
from runwright.runs import RunState
from runwright.store.params import (
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


async def test_interrupt_flags_a_running_run_and_ends_a_queued_one(store):
    wid = await store.worker_register(worker())
    running = await store.run_insert_threaded(threaded("a", "enqueue"))
    (running,) = await store.run_claim(claim(wid))
    waiting = await store.run_insert_threaded(threaded("b", "enqueue"))
    newest = await store.run_insert_threaded(threaded("c", "interrupt"))
    assert (await store.run_get(running.id)).interrupt == "interrupt"
    assert (await store.run_get(running.id)).state is RunState.RUNNING
    ended = await store.run_get(waiting.id)
    assert ended.state is RunState.INTERRUPTED and ended.interrupt == "interrupt"
    assert (await store.event_list(EventListParams(waiting.id)))[-1].kind == "interrupted"
    assert (await store.event_list(EventListParams(running.id)))[-1].kind == "interrupt_requested"
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
