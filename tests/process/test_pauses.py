"""Pause and resume with real worker processes, on every backend: a running run stops at
its next step boundary and goes on from there once resumed, no step run twice; and a run
whose step fails on version N with on_exhausted="pause" is paused at that step, then
resumed once a worker with the fix (version N+1) is deployed, and succeeds, its earlier
steps not executed again."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import runwright as rw
from runwright.runs import RunState

from . import apps, pause_apps
from .harness import wait_until

pytestmark = pytest.mark.process


async def _paused(app: rw.App, run_id: int) -> bool:
    return (await app.read_run(run_id)).paused


def _executions(fleet, run_id: int) -> Counter[str]:
    return Counter(event for event, rid, _, _ in fleet.ledger_lines() if rid == run_id)


async def test_a_running_run_pauses_at_its_next_step_and_resumes_from_there(app: rw.App, fleet) -> None:
    worker = fleet.start(concurrency=2)
    await worker.wait_started()
    handle = await app.submit(apps.narrated_steps, steps=3, gates=[1])
    await wait_until(lambda: _executions(fleet, handle.id)["gate-1"] == 1, "step 1 waits at its gate")
    asked = await app.pause(handle.id)
    assert asked.state is RunState.RUNNING and asked.pause_requested
    await wait_until(lambda: worker.logged("pause requested", handle.id), "its worker heard the request")
    fleet.open_gate(handle.id, 1)
    await wait_until(lambda: _paused(app, handle.id), "the run paused at the boundary after step 1")
    run = await app.read_run(handle.id)
    assert run.owner is None and run.attempt == 1 and not run.pause_requested
    kinds = [e.kind for e in await app.events_page(handle.id)]
    assert kinds.count("paused") == 1 and kinds[-1] == "paused" and "pause_requested" in kinds
    assert _executions(fleet, handle.id) == Counter({"step-0": 1, "step-1": 1, "gate-1": 1})

    await app.resume(handle.id)
    assert await handle.result(timeout_s=60) == 3
    assert _executions(fleet, handle.id) == Counter({"step-0": 1, "step-1": 1, "gate-1": 1, "step-2": 1})
    kinds = [e.kind for e in await app.events_page(handle.id)]
    assert kinds.count("started") == 2 and kinds[-1] == "succeeded"


async def test_a_run_paused_on_a_failing_step_succeeds_once_the_fix_is_deployed(
        app: rw.App, fleet) -> None:
    app.tasks.update(pause_apps.broken.tasks)
    old = fleet.start(concurrency=2, app_spec="tests.process.pause_apps:broken")
    await old.wait_started()
    handle = await app.submit("invoice", order="A-17")
    try:
        await wait_until(lambda: _paused(app, handle.id), "its attempts ran out and it was paused")
    except AssertionError as exc:  # once seen on a loaded machine (Redis): say where it stood
        stood = await app.read_run(handle.id)
        kinds = [(e.kind, e.data) for e in await app.events_page(handle.id)]
        raise AssertionError(f"{exc}; the run: {stood}; its events: {kinds}; "
                             f"its workers: {await app.store.worker_list()}") from exc
    run = await app.read_run(handle.id)
    assert run.state is RunState.QUEUED and run.waiting == "paused" and run.attempt == 2
    assert run.error_info()["type"] == "RuntimeError"
    assert _executions(fleet, handle.id) == Counter({"fetch": 1, "charge-broken": 2})
    log = await app.events_page(handle.id)
    assert [e.kind for e in log][-1] == "paused" and "dead" not in [e.kind for e in log]
    assert "RuntimeError" in log[-1].data["error"]
    assert await old.stop() == 0

    new = fleet.start(concurrency=2, app_spec="tests.process.pause_apps:fixed")
    await new.wait_started()
    # The new worker runs the task, and still leaves the paused run alone: another run
    # of it, submitted after, ends while this one stays paused.
    probe = await app.submit("invoice", order="B-1")
    assert await probe.result(timeout_s=60) == ["order B-1", "charged"]
    assert await _paused(app, handle.id)

    resumed = await app.resume(handle.id)
    assert resumed.state is RunState.QUEUED and not resumed.paused and resumed.attempt == 0
    assert await handle.result(timeout_s=60) == ["order A-17", "charged"]
    # The failing step ran again, on the new code; the step before it never did.
    assert _executions(fleet, handle.id) == Counter({"fetch": 1, "charge-broken": 2, "charge-fixed": 1})
    kinds = [e.kind for e in await app.events_page(handle.id)]
    assert kinds[kinds.index("resumed"):] == ["resumed", "started", "step", "succeeded"], kinds
    assert json.loads((await app.read_run(handle.id)).result) == ["order A-17", "charged"]
