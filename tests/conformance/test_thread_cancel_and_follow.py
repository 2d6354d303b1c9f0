"""Cancelling a thread's runs without deleting it, and following a whole thread."""

from __future__ import annotations

import json

from runwright.following import Follower
from runwright.runs import RunState
from runwright.store.params import (
    RunInsertParams,
    ThreadAppendParams,
    ThreadMessagesParams,
)
from runwright.threads import Threads

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
