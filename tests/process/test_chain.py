"""A chain survives a SIGKILL mid-way: each step is one child run, a child that was not in
flight runs once, fan-out and fan-in intact."""

from __future__ import annotations

import signal

import pytest

import runwright as rw
from runwright.store._params import RunListParams

from .harness import WorkerFleet, owner_pid, wait_until

pytestmark = pytest.mark.process

STEPS = [
    {"id": "a", "task": "record", "args": {"n": 1}},
    {"id": "b", "task": "hold", "args": {"tag": "b"}, "needs": ["a"]},  # killed mid-way
    {"id": "c", "task": "record", "args": {"n": 2}, "needs": ["a"]},
    {"id": "d", "task": "record", "args": {"n": "{{steps.c.output}}"}, "needs": ["b", "c"]},
]


async def test_a_chain_survives_a_sigkill_each_step_one_child_run(app: rw.App, fleet: WorkerFleet) -> None:
    first, second = fleet.start(concurrency=4), fleet.start(concurrency=4)
    chain = await app.submit("chain", steps=STEPS, input=None)
    held = await wait_until(lambda: _running_hold(app), "step b is running")
    # Running in the store is claimed, not yet begun: killed before its first start is
    # marked, step b's takeover would be a first start that waits for a release never sent.
    await wait_until(lambda: (fleet.ledger / f"started-{held.id}").exists(), "step b has begun")
    pid = await owner_pid(app, held)
    victim = first if first.pid == pid else second
    victim.signal(signal.SIGKILL)
    outputs = await chain.result(timeout_s=60)
    assert outputs["a"] == 1 and outputs["c"] == 2 and outputs["d"] == 2
    children = [r for r in await app.store.run_list(RunListParams(limit=100)) if r.parent_id == chain.id]
    assert sorted(r.task for r in children) == ["hold", "record", "record", "record"]
    assert all(r.state is rw.RunState.SUCCEEDED for r in children)
    ran = fleet.events_by_run("ran")  # the record steps' executions
    records = [r for r in children if r.task == "record"]
    assert sorted(ran) == sorted(r.id for r in records)
    # A step that was not in flight on the killed worker ran once; one that was (the kill
    # may land while c runs beside b) runs again after its takeover: at least once, and
    # once more per takeover at most.
    assert all(1 <= len(ran[r.id]) <= 1 + r.recoveries for r in records)
    (hold_run,) = [r for r in children if r.task == "hold"]
    assert hold_run.recoveries == 1 and outputs["b"]["fence"] == hold_run.fence


async def _running_hold(app: rw.App) -> rw.Run | None:
    for run in await app.store.run_list(RunListParams(task="hold", states=[rw.RunState.RUNNING])):
        return run
    return None
