"""Bulk actions over a filter, on every backend: a dry run counts and samples and changes
nothing; a retry by error text re-queues exactly the matching runs; two bulk actions racing
over the same runs change each once; a tenant acts on its own runs only; a bulk resume
takes the paused runs of its filter."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import runwright as rw
from runwright.runs import PAUSED_RUN_AT, Run, RunState, WaitReason
from runwright.store._params import (
    EventListParams,
    RunClaimParams,
    RunFinishParams,
    StepRecordParams,
    WorkerRegisterParams,
)


async def _claim(store: Any, wid: int, queue: str, count: int) -> list[Run]:
    """Claim `count` runs just submitted to `queue`. They are due by the store's clock, which
    the submitter's estimate of it may run a moment ahead of (seen once under load), so a
    claim at once may find some not yet due: claim until all are."""
    runs: list[Run] = []
    async with asyncio.timeout(30):
        while len(runs) < count:
            left = count - len(runs)
            runs += await store.run_claim(RunClaimParams(wid, (queue,), ("noop_bulk",), left, 60.0))
            if len(runs) < count:
                await asyncio.sleep(0.01)
    return runs


async def _dead_runs(app: rw.App, count: int, error: str, tenant: str | None = None) -> list[int]:
    """`count` runs ended dead with `error` in their message, by hand (a claim, a final finish)."""
    scope = app.tenant(tenant) if tenant else app
    handles = [await scope.submit("noop_bulk", n=i, queue=f"bulk-{error}") for i in range(count)]
    store = app.store
    wid = await store.worker_register(WorkerRegisterParams("bulk", 1, [f"bulk-{error}"], ["noop_bulk"]))
    runs = await _claim(store, wid, f"bulk-{error}", count)
    failure = json.dumps({"type": "RuntimeError", "message": f"upstream said: {error}", "traceback": ""})
    assert await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.DEAD, error=failure)
                                        for r in runs]) == []
    return [h.id for h in handles]


def _app(app: rw.App) -> rw.App:
    @app.task(name="noop_bulk", retries=0)
    async def noop_bulk(n: int) -> int:
        return n

    return app


async def test_a_dry_run_counts_and_a_bulk_retry_requeues_exactly_the_matching_runs(app: rw.App) -> None:
    _app(app)
    timeouts = await _dead_runs(app, 12, "timeout")
    others = await _dead_runs(app, 5, "refused")
    dry = await app.bulk("retry", error="timeout", dry_run=True)
    assert (dry.matched, dry.done, dry.capped) == (12, [], False)
    assert set(dry.sample) <= set(timeouts) and len(dry.sample) == 10
    states = {r.state for r in await app.store.run_get_many(timeouts)}
    assert states == {RunState.DEAD}, "a dry run changes nothing"
    seen: list[tuple[int, int]] = []
    capped = await app.bulk("retry", error="timeout", limit=5, progress=lambda a, m: seen.append((a, m)))
    assert (capped.matched, len(capped.done), capped.capped) == (5, 5, True) and seen[-1] == (5, 5)
    rest = await app.bulk("retry", error="timeout")
    assert sorted(capped.done + rest.done) == sorted(timeouts) and rest.refused == {}
    states = {r.state for r in await app.store.run_get_many(others)}
    assert states == {RunState.DEAD}, "not matched: untouched"
    cancelled = await app.bulk("cancel", task="noop_bulk", states=["queued"])
    assert sorted(cancelled.done) == sorted(timeouts)


async def test_two_bulk_actions_racing_change_each_run_once(app: rw.App) -> None:
    _app(app)
    dead = await _dead_runs(app, 30, "race")
    first, second = await asyncio.gather(app.bulk("retry", error="race"), app.bulk("retry", error="race"))
    assert sorted(first.done + second.done) == sorted(dead), "each run re-queued once"
    assert set(first.done).isdisjoint(second.done)
    for run_id, why in {**first.refused, **second.refused}.items():
        assert run_id in dead and "RunNotRetryable" in why, why
    retried = [e for run_id in dead for e in await app.store.event_list(EventListParams(run_id))
               if e.kind == "retried"]
    assert len(retried) == len(dead)


async def test_a_tenant_acts_on_its_own_runs_only(app: rw.App) -> None:
    _app(app)
    theirs = await _dead_runs(app, 3, "tenant", tenant="acme")
    mine = await _dead_runs(app, 2, "tenant")
    other = await app.tenant("globex").bulk("retry", error="tenant")
    assert (other.matched, other.done) == (0, [])
    acme = await app.tenant("acme").bulk("retry", error="tenant")
    assert sorted(acme.done) == sorted(theirs)
    assert {r.state for r in await app.store.run_get_many(mine)} == {RunState.DEAD}


async def _paused_runs(app: rw.App, count: int, error: str, tenant: str | None = None) -> list[int]:
    """`count` runs paused at a failing step with `error` in their message, as a worker
    pauses a run whose attempts ran out (on_exhausted="pause")."""
    scope = app.tenant(tenant) if tenant else app
    handles = [await scope.submit("noop_bulk", n=i, queue=f"pause-{error}") for i in range(count)]
    store = app.store
    wid = await store.worker_register(WorkerRegisterParams("bulk", 1, [f"pause-{error}"], ["noop_bulk"]))
    runs = await _claim(store, wid, f"pause-{error}", count)
    failure = json.dumps({"type": "RuntimeError", "message": f"upstream said: {error}", "traceback": ""})
    assert await store.run_finish_many([RunFinishParams(
        r.id, r.fence, RunState.QUEUED, release=True, error=failure, run_at=PAUSED_RUN_AT,
        waiting=WaitReason.PAUSED, event_kind="paused") for r in runs]) == []
    return [h.id for h in handles]


async def test_a_bulk_resume_takes_the_paused_runs_of_its_filter_once_each(app: rw.App) -> None:
    _app(app)
    paused = await _paused_runs(app, 6, "outage")
    others = await _paused_runs(app, 2, "other")
    dead = await _dead_runs(app, 2, "outage")
    dry = await app.bulk("resume", error="outage", dry_run=True)
    assert (dry.matched, dry.done) == (6, []) and set(dry.sample) == set(paused)
    assert all(run.paused for run in await app.store.run_get_many(paused)), "a dry run changes nothing"
    first, second = await asyncio.gather(*(app.bulk("resume", error="outage") for _ in range(2)))
    assert sorted(first.done + second.done) == sorted(paused), "each paused run resumed once"
    for run_id, why in {**first.refused, **second.refused}.items():
        assert run_id in paused and "RunNotPaused" in why, why
    runs = await app.store.run_get_many(paused)
    assert all(run.state is RunState.QUEUED and not run.paused and run.attempt == 0 for run in runs)
    assert all(run.paused for run in await app.store.run_get_many(others)), "not matched: untouched"
    assert {r.state for r in await app.store.run_get_many(dead)} == {RunState.DEAD}
    resumed = [e for run_id in paused for e in await app.store.event_list(EventListParams(run_id))
               if e.kind == "resumed"]
    assert len(resumed) == len(paused)


async def test_a_tenant_resumes_its_own_paused_runs_only(app: rw.App) -> None:
    _app(app)
    theirs = await _paused_runs(app, 2, "mine", tenant="acme")
    mine = await _paused_runs(app, 2, "mine")
    assert (await app.tenant("globex").bulk("resume")).matched == 0
    with pytest.raises(rw.RunNotFound):
        await app.tenant("globex").resume(theirs[0])
    with pytest.raises(rw.RunNotFound):
        await app.tenant("globex").pause(mine[0])
    acme = await app.tenant("acme").bulk("resume")
    assert sorted(acme.done) == sorted(theirs)
    assert all(run.paused for run in await app.store.run_get_many(mine))
async def test_a_bulk_fork_forks_each_failed_run_from_its_failing_step_once(app: rw.App) -> None:
    _app(app)
    store = app.store
    failed = []
    wid = await store.worker_register(WorkerRegisterParams("bulk", 1, ["bulk-fork"], ["noop_bulk"]))
    for i in range(6):
        handle = await app.submit("noop_bulk", n=i, queue="bulk-fork")
        (run,) = await _claim(store, wid, "bulk-fork", 1)
        assert await store.step_record_many([StepRecordParams(run.id, run.fence, 0, "fetch", "done", "1")])
        assert await store.step_record_many([StepRecordParams(run.id, run.fence, 1, "send", "failed",
                                                              error='{"type": "E"}')])
        assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.FAILED,
                                                            error='{"type": "E", "message": "send"}')]) == []
        failed.append(handle.id)
    dry = await app.bulk("fork", task="noop_bulk", dry_run=True)
    assert (dry.matched, dry.done) == (6, [])
    first, second = await asyncio.gather(app.bulk("fork", task="noop_bulk"),
                                         app.bulk("fork", task="noop_bulk"))
    assert sorted(first.done + second.done) == sorted(failed), "each run forked once"
    for run_id, why in {**first.refused, **second.refused}.items():
        assert run_id in failed and why.startswith("ForkedAlready: ") and "from step 1" in why, why
    for run_id in failed:
        (fork,) = await app.forks(run_id)
        assert [(s.name, s.status) for s in await app.steps(fork.id)] == [("fetch", "done")]
        assert fork.state is RunState.QUEUED and fork.key == f"runwright-fork:{run_id}:1"
    again = await app.bulk("fork", task="noop_bulk")  # the forks are queued: only the originals match
    assert again.done == [] and sorted(again.refused) == sorted(failed)
