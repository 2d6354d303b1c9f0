"""A SIGKILLed worker's slot in a concurrency limit, with real worker processes, on every
backend: while its run is still RUNNING (its lease, or its death not yet seen) the slot
stays taken, and the next run of the key waits; once the run is taken over the slot
comes back, and the key's runs go on one at a time. The store is sampled throughout:
never two runs of the key running at once."""

from __future__ import annotations

import asyncio
import time

import pytest

import runwright as rw
from runwright.runs import RunState
from runwright.store._params import RunInsertParams

from . import apps
from .harness import DEADLINE_S, WorkerFleet, owner_pid, wait_until

pytestmark = pytest.mark.process


async def test_a_sigkilled_workers_slot_comes_back_at_takeover_and_is_never_doubled(
        app: rw.App, fleet: WorkerFleet) -> None:
    victim = fleet.start(concurrency=4, lease_s=5)
    await victim.wait_started()
    first = await app.submit(apps.hold_limited, tag="first", customer="acme")
    second = await app.submit(apps.hold_limited, tag="second", customer="acme")
    # In its hold (its first start marked): killed before that, its takeover would be the
    # first start, and hold until the test's end.
    await wait_until(lambda: (fleet.ledger / f"started-{first.id}").exists(), "the first run holds")
    run = await app.store.run_get(first.id)
    assert run is not None and await owner_pid(app, run) == victim.pid
    assert (await app.store.run_get(second.id)).state is RunState.QUEUED  # held: acme's one slot
    victim.kill()  # SIGKILL: it writes nothing more
    survivor = fleet.start(concurrency=4, lease_s=5)
    await survivor.wait_started()
    fleet.release("second")  # the second run, once started, ends at once
    ids = [first.id, second.id]
    deadline = time.monotonic() + 3 * DEADLINE_S
    most = 0
    while time.monotonic() < deadline:
        runs = await app.store.run_get_many(ids)
        running = sum(1 for r in runs if r.state is RunState.RUNNING)
        most = max(most, running)
        assert running <= 1, f"{running} runs of one customer limited to 1 ran at once"
        if all(r.state is RunState.SUCCEEDED for r in runs):
            break
        await asyncio.sleep(0.01)
    runs = {r.id: r for r in await app.store.run_get_many(ids)}
    assert [runs[i].state for i in ids] == [RunState.SUCCEEDED, RunState.SUCCEEDED], runs
    assert runs[first.id].recoveries == 1, "the first run was taken over, not run again from scratch"
    # The last attempts, by the store's clock, one after the other (whichever went first
    # once the first was taken over: its due time is its takeover's).
    a, b = runs[first.id], runs[second.id]
    assert a.started_at and a.finished_at and b.started_at and b.finished_at
    assert b.started_at >= a.finished_at or a.started_at >= b.finished_at, (a, b)
    assert most == 1


async def test_runs_queued_with_limits_their_task_no_longer_declares_are_still_run(
        app: rw.App, fleet: WorkerFleet) -> None:
    """Runs submitted while their task declared a concurrency limit carry it; a deploy
    that removed the `rw.Limit` must not strand them: a worker of the new code (no limit
    on `record`) finds them and runs each once, under the limit they carry (max 1)."""
    limits = '[["crm", "gone", 1]]'
    queued = await app.store.run_insert_many([RunInsertParams(
        key=f"stray-{i}", task="record", args=f'{{"n": {i}}}', limits=limits) for i in range(4)])
    worker = fleet.start(concurrency=4)
    await worker.wait_started()
    ids = [run.id for run in queued]
    deadline = time.monotonic() + 3 * DEADLINE_S
    while time.monotonic() < deadline:
        runs = await app.store.run_get_many(ids)
        assert sum(1 for r in runs if r.state is RunState.RUNNING) <= 1, "the carried limit of 1 broke"
        if all(r.state is RunState.SUCCEEDED for r in runs):
            break
        await asyncio.sleep(0.01)
    assert [r.state for r in await app.store.run_get_many(ids)] == [RunState.SUCCEEDED] * 4
    ran = [run_id for event, run_id, _, _ in fleet.ledger_lines() if event == "ran"]
    assert sorted(ran) == sorted(ids), "each run executed once"
