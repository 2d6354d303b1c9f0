"""A Redis worker's liveness is its process's, not its event loop's.

Its liveness key is kept by a thread (store/redis/_keeper.py). Before, a task of the loop
kept it, and a loop slowed by a loaded machine past one TTL plus the lapse grace read as
a dead process: a rolling upgrade under the full suite saw a worker two seconds old lose
its five runs to a rescuer that ran them again. Here a worker's loop is blocked outright
for several TTLs while another worker process rescues every half second: nothing is
taken over. A SIGSTOPped process (its thread stopped too) is still taken over by its
liveness, long before its lease would expire.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

import runwright as rw
from runwright.runs import Run, RunState

from . import apps
from .harness import WorkerFleet, owner_pid, wait_until

pytestmark = [pytest.mark.process, pytest.mark.parametrize("backend", ["redis"])]

LEASE_S = 60.0  # far past every wait here: a takeover can only come from liveness
BLOCKED_S = 4.0  # four TTLs (1 s) and more, well past the lapse grace (0.3 s)


async def running(app: rw.App, run_id: int) -> Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.state is RunState.RUNNING else None


async def alive_ms(app: rw.App, worker_id: int) -> int:
    """What the worker's liveness key has left to live (negative: no key)."""
    store = app.store
    return int(await store.redis.pttl(store.key(f"alive:{worker_id}")))  # type: ignore[attr-defined]


async def test_a_worker_whose_event_loop_is_blocked_keeps_its_liveness_and_its_runs(
        app: rw.App, fleet: WorkerFleet) -> None:
    victim = fleet.start(concurrency=2, lease_s=LEASE_S)
    # A rescuer looks every half second, over every queue; it serves another, so the run
    # is the victim's. Started before the block: a start slowed past the fleet's TTL
    # (10 s) by a loaded machine would find the blocked victim's fleet slot lapsed (the
    # loop keeps that one, by design) and take it, ending the victim's worker with it.
    rescuer = fleet.start(concurrency=2, args=["--queues", "elsewhere"])
    await victim.wait_started()
    await rescuer.wait_started()
    handle = await app.submit(apps.block_loop, tag="blocked")
    await wait_until(lambda: handle.id in fleet.events_by_run("stalled"), "the run blocks its worker's loop")
    run = await running(app, handle.id)
    assert run is not None and run.owner is not None
    assert await owner_pid(app, run) == victim.pid
    # The loop turns no more; the key must be set again all the same, every quarter TTL.
    loop = asyncio.get_running_loop()
    until = loop.time() + BLOCKED_S
    lows = []
    while loop.time() < until:
        lows.append(await alive_ms(app, run.owner))
        await asyncio.sleep(0.1)
    assert min(lows) > 0, f"the blocked worker's liveness key lapsed: {lows}"
    after = await app.store.run_get(handle.id)
    assert after is not None
    assert (after.state, after.fence, after.recoveries) == (RunState.RUNNING, run.fence, 0), \
        "a worker whose loop was only busy was taken over"
    fleet.release("blocked")
    done = await wait_until(lambda: _ended(app, handle.id), "the run ends")
    assert done.state is RunState.SUCCEEDED, done.error
    assert done.value()["pid"] == victim.pid and done.fence == run.fence
    assert len(fleet.events_by_run("stalled")[handle.id]) == 1, "the run started twice"
    assert "registration lost" not in victim.log()


async def test_a_sigstopped_worker_is_taken_over_by_its_liveness_long_before_its_lease(
        app: rw.App, fleet: WorkerFleet) -> None:
    victim = fleet.start(concurrency=2, lease_s=LEASE_S)
    await victim.wait_started()
    handle = await app.submit(apps.hold, tag="stopped")
    run = await wait_until(lambda: running(app, handle.id), "the run runs on the victim")
    assert await owner_pid(app, run) == victim.pid
    await wait_until(lambda: (fleet.ledger / f"started-{run.id}").exists(), "its first start has begun")
    rescuer = fleet.start(concurrency=2)
    await rescuer.wait_started()
    victim.signal(signal.SIGSTOP)
    try:
        # Bounded well inside the lease: only the lapsed key can explain a takeover.
        taken = await wait_until(lambda: _taken_over(app, run), "the stopped worker's run is taken over",
                                 timeout_s=LEASE_S / 3)
        assert taken.recoveries == 1
        done = await wait_until(lambda: _ended(app, handle.id), "the run ends")
        assert done.state is RunState.SUCCEEDED and done.value()["pid"] == rescuer.pid
    finally:
        victim.kill()


async def _taken_over(app: rw.App, run: Run) -> Run | None:
    now = await app.store.run_get(run.id)
    return now if now is not None and now.fence > run.fence else None


async def _ended(app: rw.App, run_id: int) -> Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None
