"""Cancelling a thread's runs without deleting it, and following a whole thread."""

from __future__ import annotations

import json

import pytest

from runwright.client._following import Follower
from runwright.client._threads import Threads
from runwright.errors import ThreadDeleted, ThreadNotFound
from runwright.runs import RunState
from runwright.store._params import (
    EventAppendParams,
    EventListParams,
    RunFinishParams,
    RunInsertParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadMessagesParams,
)

from .helpers import T0, claim, worker


def threaded(key: str, thread: str = "t1", tenant: str | None = None,
             on_busy: str = "enqueue") -> RunInsertParams:
    return RunInsertParams(key=key, task="t", args="{}", thread=thread, on_busy=on_busy,
                           tenant=tenant, now=T0)


async def test_cancel_thread_cancels_its_open_runs_only_and_keeps_the_thread(store):
    wid = await store.worker_register(worker())
    running = await store.run_insert_threaded(threaded("a"))
    (running,) = await store.run_claim(claim(wid))
    await store.thread_append(ThreadAppendParams(running.id, running.fence, "t1", 0, '"hi"', now=T0))
    queued = [await store.run_insert_threaded(threaded(key)) for key in ("b", "c")]
    elsewhere = await store.run_insert_threaded(threaded("d", thread="t2"))
    other_tenant = await store.run_insert_threaded(threaded("e", tenant="x"))

    cancelled = await Threads(store, Follower(store)).cancel("t1", None)

    assert [r.id for r in cancelled] == [running.id, *(r.id for r in queued)]
    assert [(await store.run_get(r.id)).state for r in queued] == [RunState.CANCELLED] * 2
    still = await store.run_get(running.id)
    assert still.state is RunState.RUNNING and still.cancel_requested  # its worker stops it
    for untouched in (elsewhere, other_tenant):
        assert (await store.run_get(untouched.id)).state is RunState.QUEUED
    # Not deleted: the history is there, and the thread takes new runs.
    assert [json.loads(m) for _, _, m in await store.thread_messages(ThreadMessagesParams("t1"))] == ["hi"]
    after = await store.run_insert_threaded(threaded("f"))
    assert not after.existed and after.state is RunState.QUEUED
    assert await Threads(store, Follower(store)).cancel("no-such-thread", None) == []


async def thread_log(store, thread: str = "t1", tenant: str | None = None, after: int = 0,
                     limit: int = 3) -> list:
    """The whole thread log after `after`, read in small pages (so paging is exercised)."""
    out: list = []
    while page := await store.thread_event_list(ThreadEventListParams(thread, tenant, after, limit)):
        out += page
        after = page[-1].tseq
    return out


async def emit(store, run, *kinds: str) -> None:
    assert await store.event_append(EventAppendParams(
        run.id, run.fence, [(kind, json.dumps({"n": i})) for i, kind in enumerate(kinds)], now=T0))


async def test_a_thread_log_numbers_every_event_of_its_runs_gapless_and_stably(store):
    wid = await store.worker_register(worker())
    first = await store.run_insert_threaded(threaded("a"))
    (first,) = await store.run_claim(claim(wid))
    await emit(store, first, "tokens", "tokens")
    second = await store.run_insert_threaded(threaded("b"))  # waits behind the first
    elsewhere = await store.run_insert_threaded(threaded("c", thread="t2"))
    same_name = await store.run_insert_threaded(threaded("d", tenant="x"))

    early = await thread_log(store)
    assert [e.tseq for e in early] == list(range(1, len(early) + 1))
    await emit(store, first, "progress")
    await store.run_finish_many([RunFinishParams(first.id, first.fence, RunState.SUCCEEDED,
                                                 result="1", now=T0)])
    second = next(r for r in await store.run_claim(claim(wid)) if r.id == second.id)
    await emit(store, second, "tokens")

    log = await thread_log(store)
    assert log[:len(early)] == early  # numbers once given never change
    assert [e.tseq for e in log] == list(range(1, len(log) + 1))  # gapless
    for run in (first, second):  # every event of each run, in its own order
        own = [(e.seq, e.kind, e.data) for e in log if e.run_id == run.id]
        logged = await store.event_list(EventListParams(run.id))
        assert own == [(e.seq, e.kind, e.data) for e in logged]
    assert {e.run_id for e in log} == {first.id, second.id}  # not t2, not tenant x's "t1"
    assert await thread_log(store, after=4) == log[4:]  # resumable from a tseq
    assert {e.run_id for e in await thread_log(store, tenant="x")} == {same_name.id}
    assert {e.run_id for e in await thread_log(store, thread="t2")} == {elsewhere.id}
    with pytest.raises(ThreadNotFound):
        await store.thread_event_list(ThreadEventListParams("never-made"))


async def test_a_deleted_threads_log_is_gone(store):
    await store.run_insert_threaded(threaded("a"))
    assert len(await thread_log(store)) == 1
    assert await store.thread_delete(ThreadDeleteParams("t1", purge=True))
    with pytest.raises(ThreadDeleted):
        await store.thread_event_list(ThreadEventListParams("t1"))


async def test_readers_numbering_at_once_never_give_a_number_twice(store):
    import asyncio

    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("a"))
    (run,) = await store.run_claim(claim(wid))
    for round_ in range(3):
        await emit(store, run, *(["tokens"] * 20))
        pages = await asyncio.gather(*(store.thread_event_list(ThreadEventListParams("t1", limit=1000))
                                       for _ in range(5)))
        assert all(page == pages[0] for page in pages)  # one numbering, seen by all
        assert [e.tseq for e in pages[0]] == list(range(1, 2 + 20 * (round_ + 1) + 1))
