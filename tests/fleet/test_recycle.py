"""Rolling recycles with real processes, on every transport: under `--processes 3` with a
steady load of runs (no run lost, none run twice under one claim), and under an outside
supervisor (the process exits 0 after its drain; the roll stops there and says why)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

import pytest

import runwright as rw

from ..process.harness import wait_until
from .conftest import Processes
from .test_processes import ready_rows


# A pool of processes recycled under load (the most measured: 28).
@pytest.mark.pg_connections(34)
async def test_a_rolling_recycle_under_load_loses_no_run(client: rw.App, processes: Processes):
    processes.start("--processes", "3", "-c", "4")
    before = {r["name"]: r for r in await ready_rows(client, 3)}
    handles: list[rw.RunHandle] = []
    submitting = asyncio.Event()

    async def steady_load() -> None:
        while not submitting.is_set():
            handles.append(await client.submit("work", n=len(handles)))
            await asyncio.sleep(0.05)

    load = asyncio.create_task(steady_load())
    try:
        report = await client.fleet.recycle("worker")
    finally:
        submitting.set()
        await load
    assert report.ok, report.to_dict()
    assert [step.name for step in report.steps] == ["worker-1", "worker-2", "worker-3"]
    after = {r["name"]: r for r in await ready_rows(client, 3)}
    for name, row in before.items():  # each slot is held by a new life, of a new process
        assert after[name]["generation"] > row["generation"] and after[name]["pid"] != row["pid"]
    results = [await handle.result(timeout_s=120) for handle in handles]
    assert results == list(range(len(handles))) and len(handles) > 10
    executions = _executions(processes)
    assert set(executions) == {h.id for h in handles}  # every run ran
    # At least once, never twice under one claim: a second execution had a new fence.
    assert all(count == 1 for count in Counter(
        (run_id, fence) for run_id, fences in executions.items() for fence in fences).values())


async def test_under_an_outside_supervisor_a_recycled_process_exits_0(client, processes):
    proc = processes.start()
    [row] = await ready_rows(client, 1)
    # No new life ever comes here, so the roll waits out its whole window: 15 s is ample for a
    # drain of 2 s, where the fleet tests' 60 s (sized for --processes 3 under load) is idle.
    client.fleet.settings = dataclasses.replace(client.fleet.settings, apply_window_s=15.0)
    report = await client.fleet.recycle("worker")
    assert not report.ok and report.stopped_at == row["name"]
    assert "capacity is 0 of 1" in report.steps[0].why
    await wait_until(lambda: proc.poll() is not None, "the recycled process exits")
    assert proc.returncode == 0
    assert await client.fleet.workers() == []


def _executions(processes: Processes) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for path in processes.ledger.glob("*.log"):
        for line in path.read_text().splitlines():
            _, run_id, fence, _ = line.split()
            found.setdefault(int(run_id), []).append(int(fence))
    return found
