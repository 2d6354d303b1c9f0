"""Retention passes side by side, on every backend: two, five or ten passes at once (each
its own store, so its own connections: a worker's sweep beside `runwright sweep`s) each
succeed, and the work they do is disjoint, its union what one pass alone would have
done: no run, message or tombstone is removed twice or left behind, and every removed
run is remembered as reclaimed (no pass's rewrite of the reclaimed ranges loses another's)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from runwright.runs import RunState
from runwright.store import Store, store_from_url
from runwright.store._params import (
    RunFinishParams,
    RunInsertParams,
    RunReclaimParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
)

from .helpers import T0, claim, insert, worker

_keys = itertools.count()
THREADS, TURNS, MESSAGES = 6, 4, 3  # per thread: its runs, and each run's messages
KEEP_RUNS, KEEP_MESSAGES = 1, 2
BATCH = 3  # small, so that each pass makes many batches and the passes interleave


async def _turn(store: Store, wid: int, thread: str) -> int:
    """One ended run of `thread`, with MESSAGES messages in the thread's history."""
    await store.run_insert_threaded(RunInsertParams(key=f"{thread}-{next(_keys)}", task="t", args="{}",
                                                    thread=thread, on_busy="enqueue", now=T0))
    (run,) = await store.run_claim(claim(wid, now=T0))
    for idx in range(MESSAGES):
        assert await store.thread_append(ThreadAppendParams(run.id, run.fence, thread, idx,
                                                            json.dumps(idx), now=T0))
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.FAILED, now=T0)]) == []
    return run.id


async def _old_runs(store: Store, wid: int, count: int) -> list[int]:
    await store.run_insert_many([insert(now=T0) for _ in range(count)])
    runs = await store.run_claim(claim(wid, limit=count, now=T0))
    assert await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.SUCCEEDED, now=T0)
                                        for r in runs]) == []
    return [r.id for r in runs]


@pytest.fixture
async def others(store_url: str, request: pytest.FixtureRequest) -> AsyncIterator[list[Store]]:
    stores = [store_from_url(store_url) for _ in range(request.param)]
    await asyncio.gather(*(s.open() for s in stores))
    yield stores
    await asyncio.gather(*(s.close() for s in stores))


async def _at_once(stores: list[Store], batch: Callable[[Store], Awaitable[Any]],
                   size: Callable[[Any], int]) -> list[list[Any]]:
    """Every store drains one kind of work in batches, all at once, until its batch comes
    back empty; each one's batches, in order."""
    async def drain(store: Store) -> list[Any]:
        done = []
        while size(got := await batch(store)):
            done.append(got)
        return done

    return list(await asyncio.gather(*(drain(s) for s in stores)))


def _disjoint_union(per_pass: list[list[Any]]) -> set[Any]:
    flat = [item for one in per_pass for item in one]
    assert len(flat) == len(set(flat)), "two passes did the same work"
    return set(flat)


@pytest.mark.parametrize("others", [2, 5, 10], indirect=True)
async def test_passes_at_once_each_succeed_with_disjoint_work(store: Store, others: list[Store]) -> None:
    wid = await store.worker_register(worker())
    by_thread = {f"th{n}": [await _turn(store, wid, f"th{n}") for _ in range(TURNS)] for n in range(THREADS)}
    old = await _old_runs(store, wid, 20)
    beyond_cap = {run_id for runs in by_thread.values() for run_id in runs[:-KEEP_RUNS]}

    capped = await _at_once(others, lambda s: s.thread_run_reclaim(
        ThreadRunReclaimParams(KEEP_RUNS, BATCH)), lambda got: len(got.run_ids))
    assert _disjoint_union([[i for got in one for i in got.run_ids] for one in capped]) == beyond_cap

    kept = {runs[-1] for runs in by_thread.values()}
    aged = await _at_once(others, lambda s: s.run_reclaim(
        RunReclaimParams(ended_before=T0 + 100, limit=BATCH)), lambda got: len(got.run_ids))
    assert _disjoint_union([[i for got in one for i in got.run_ids] for one in aged]) == {*old, *kept}
    for run_id in [*beyond_cap, *old, *kept]:
        assert await store.run_get(run_id) is None
        assert await store.run_was_reclaimed(run_id), f"run {run_id}'s removal was forgotten"

    trimmed = await _at_once(others, lambda s: s.thread_message_trim(
        ThreadMessageTrimParams(KEEP_MESSAGES, BATCH)), lambda got: got.messages)
    removed = sum(got.messages for one in trimmed for got in one)
    assert removed == THREADS * (TURNS * MESSAGES - KEEP_MESSAGES), "a message was counted twice or left"

    for thread in by_thread:
        assert await store.thread_delete(ThreadDeleteParams(thread, now=T0))
    tombstones = await _at_once(others, lambda s: s.thread_tombstone_reclaim(
        ThreadTombstoneReclaimParams(10, BATCH, now=T0 + 1000)), lambda got: len(got.threads))
    assert _disjoint_union([[t for got in one for t in got.threads] for one in tombstones]) == {
        (None, thread) for thread in by_thread}
