"""Following a whole thread and cancelling its runs, with a real worker, on every backend."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

import runwright as rw
from runwright.store._params import (
    EventListParams,
    RunClaimParams,
    RunFinishParams,
    ThreadTombstoneReclaimParams,
    WorkerRegisterParams,
)

from .conftest import running_worker

DEADLINE_S = 30


def register(app: rw.App, gate: asyncio.Event) -> None:
    @app.task
    async def chat(ctx: rw.Context, text: str, wait: bool = False) -> str:
        await ctx.emit("said", {"text": text})
        if wait:
            await asyncio.wait_for(gate.wait(), DEADLINE_S)
        await ctx.emit("said", {"text": text.upper()})
        return text


async def read_until(stream, count: int, into: list) -> None:
    async with asyncio.timeout(DEADLINE_S):
        async for item in stream:
            into.append(item)
            if len(into) >= count:
                return


async def all_events(app: rw.App, run_ids) -> list[tuple[int, int]]:
    out = []
    for run_id in run_ids:
        out += [(e.run_id, e.seq) for e in await app.store.event_list(EventListParams(run_id))]
    return out


async def test_a_thread_is_followed_run_after_run_and_resumed_from_a_tseq(app):
    gate = asyncio.Event()
    register(app, gate)
    async with running_worker(app, concurrency=4):
        first = await app.submit("chat", text="one", wait=True, thread="t", on_busy="enqueue")
        second = await app.submit("chat", text="two", thread="t", on_busy="enqueue")
        seen: list[rw.ThreadEvent] = []
        # Until the first run waits: submitted x2, started, said.
        await read_until(app.follow_thread("t"), 4, seen)
        gate.set()
        await read_until(app.follow_thread("t", after=seen[-1].tseq), 4 + 6, seen)  # resumed
        await second.result(timeout_s=DEADLINE_S)
        # A run that joins the thread later, while the follower waits on an idle thread.
        late: list[rw.ThreadEvent] = []
        reader = asyncio.create_task(read_until(app.follow_thread("t", after=seen[-1].tseq), 5, late))
        third = await app.submit("chat", text="three", thread="t", on_busy="enqueue")
        await reader
        await third.result(timeout_s=DEADLINE_S)
    seen += late
    assert [e.tseq for e in seen] == list(range(1, len(seen) + 1))  # gapless, no repeat
    assert sorted((e.run_id, e.seq) for e in seen) == await all_events(app, [first.id, second.id, third.id])
    for run in (first, second, third):  # each run's events in their own order
        seqs = [e.seq for e in seen if e.run_id == run.id]
        assert seqs == sorted(seqs)
    said = [e.data["text"] for e in seen if e.kind == "said"]
    assert said == ["one", "ONE", "two", "TWO", "three", "THREE"]
    kinds = [e.kind for e in seen if e.run_id == third.id]
    assert kinds == ["submitted", "started", "said", "said", "succeeded"]


async def test_cancel_thread_stops_its_running_and_queued_runs_and_keeps_the_thread(app):
    gate = asyncio.Event()
    register(app, gate)
    async with running_worker(app, concurrency=4):
        running = await app.submit("chat", text="one", wait=True, thread="t", on_busy="enqueue")
        waiting = await app.submit("chat", text="two", thread="t", on_busy="enqueue")
        started: list = []
        await read_until((e async for e in running.events() if e.kind == "said"), 1, started)
        cancelled = await app.cancel_thread("t")
        assert [r.id for r in cancelled] == [running.id, waiting.id]
        assert (await app.wait_done(running.id)).state is rw.RunState.CANCELLED
        assert (await app.get(waiting.id)).state is rw.RunState.CANCELLED
        gate.set()
        after = await app.submit("chat", text="again", thread="t", on_busy="reject")  # the thread lives
        assert await after.result(timeout_s=DEADLINE_S) == "again"


async def test_a_deleted_threads_run_is_not_the_new_threads_in_the_library(app):
    @app.task
    async def note(ctx: rw.Context) -> None:
        return None

    first = await app.submit("note", thread="t")
    wid = await app.store.worker_register(WorkerRegisterParams("h", os.getpid(), ["default"], ["note"]))
    (run,) = await app.store.run_claim(RunClaimParams(wid, ["default"], ["note"], 1, 30))
    await app.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.DEAD,
                                                     error='{"type": "X"}')])
    old = app.thread("t")
    assert [r.id for r in await old.runs()] == [first.id]
    await app.delete_thread("t")
    with pytest.raises(rw.ThreadDeleted):
        await app.retry(first.id)
    assert (await app.retry_many([first.id]))[0] == []
    await app.store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(0.0, now=time.time() + 60))
    second = await app.submit("note", thread="t")
    assert [r.id for r in await app.thread("t").runs()] == [second.id]
    assert [r.id for r in await app.list_runs(thread="t")] == [second.id]
    with pytest.raises(rw.ThreadDeleted):
        await old.runs()  # it holds the deleted thread's incarnation
    with pytest.raises(rw.ThreadDeleted):
        await app.list_runs(thread="t", incarnation=old.incarnation)
    with pytest.raises(rw.ThreadDeleted):
        await app.retry(first.id)
    assert (await first.refresh()).state is rw.RunState.DEAD
