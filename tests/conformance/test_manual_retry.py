"""A manual retry takes a dead or failed run back to queued, and nothing else: a live run
keeps its claim, an end a person or a thread chose stays, and a refusal changes nothing."""

from __future__ import annotations

import asyncio
import random

import pytest

from runwright.errors import RunNotRetryable
from runwright.runs import RETRYABLE_STATES, RunState
from runwright.store import store_from_url
from runwright.store._params import (
    EventListParams,
    RunCancelParams,
    RunFinishParams,
    RunRetryParams,
)

from .helpers import T0, claim, insert, worker

ENDS = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)


async def in_state(store, wid: int, state: RunState, name: str):
    """A run of its own task `name` put in `state` the way the engine puts it there."""
    first = insert(task=name)
    if state is RunState.INTERRUPTED:
        first.thread, first.on_busy = f"thread-{name}", "enqueue"
        run = await store.run_insert_threaded(first)
    else:
        (run,) = await store.run_insert_many([first])
    if state is RunState.CANCELLED:
        return await store.run_cancel(RunCancelParams(run.id, now=T0))
    if state is RunState.QUEUED:
        return run
    (run,) = await store.run_claim(claim(wid, limit=1, tasks=(name,)))
    if state is RunState.INTERRUPTED:
        newer = insert(task=f"{name}-newer")
        newer.thread, newer.on_busy = first.thread, "interrupt"
        await store.run_insert_threaded(newer)  # asks the running run to stop
        assert (await store.run_get(run.id)).interrupt == "interrupt"
        assert await store.run_finish_many([RunFinishParams(  # as its owner ends it then
            run.id, run.fence, state, error='{"type": "Interrupted"}', event_data='{"mode": "interrupt"}',
            now=T0 + 1)]) == []
        return await store.run_get(run.id)
    if state in ENDS:
        assert await store.run_finish_many([RunFinishParams(
            run.id, run.fence, state, result="1", error='{"type": "E"}', now=T0 + 1)]) == []
        return await store.run_get(run.id)
    return run


async def seen(store, run_id: int):
    """All a retry could change: the run, its journal and its log."""
    return (await store.run_get(run_id), await store.step_list(run_id),
            await store.event_list(EventListParams(run_id, 0, 1000)))


@pytest.mark.parametrize("state", list(RunState), ids=str)
async def test_a_manual_retry_takes_only_dead_or_failed_runs(store, state: RunState):
    wid = await store.worker_register(worker())
    run = await in_state(store, wid, state, f"task-{state}")
    assert run.state is state
    before = await seen(store, run.id)
    if state not in RETRYABLE_STATES:
        where = f"already ended {state}" if run.done else f"is {state}"
        with pytest.raises(RunNotRetryable, match=f"{where}: only a dead or failed run"):
            await store.run_retry(RunRetryParams(run.id, now=T0 + 2, by="ops"))
        assert await seen(store, run.id) == before
        return
    retried = await store.run_retry(RunRetryParams(run.id, now=T0 + 2, by="ops"))
    assert retried.state is RunState.QUEUED and retried.fence == run.fence and retried.attempt == 0
    events = await store.event_list(EventListParams(run.id, before[2][-1].seq, 10))
    assert [(e.kind, e.data) for e in events] == [("retried", {"previous": str(state), "by": "ops"})]
    assert retried.last_seq == events[-1].seq


async def test_retries_racing_claims_never_supersede_a_live_claim(store, store_url):
    """Many connections retry every run over and over while others claim them and end
    them dead: each owner's end is accepted (its claim was never superseded by a retry),
    and every retry either re-queued a dead run or was refused as not retryable."""
    others = [store_from_url(store_url) for _ in range(4)]
    for other in others:
        await other.open()
    try:
        wid = await store.worker_register(worker())
        runs = await store.run_insert_many([insert() for _ in range(20)])
        ids = [run.id for run in runs]
        superseded: list[int] = []
        retried: list[int] = []
        done = asyncio.Event()

        async def own(s) -> None:
            for _ in range(40):
                for run in await s.run_claim(claim(wid, limit=3)):
                    await asyncio.sleep(0)  # the claim stays live a moment
                    superseded.extend(await s.run_finish_many([RunFinishParams(
                        run.id, run.fence, RunState.DEAD, error='{"type": "E"}')]))
            done.set()

        async def retry(s) -> None:
            while not done.is_set():
                for run_id in random.sample(ids, len(ids)):
                    try:
                        retried.append((await s.run_retry(RunRetryParams(run_id))).id)
                    except RunNotRetryable:
                        pass

        await asyncio.gather(own(store), own(others[0]), retry(others[1]), retry(others[2]),
                             retry(others[3]))
        assert superseded == []
        assert retried, "no retry met a dead run: the race was not run"
        for run in await store.run_get_many(ids):
            assert run.state in (RunState.QUEUED, RunState.RUNNING, RunState.DEAD)
    finally:
        for other in others:
            await other.close()
