"""A run that no live worker can run is closed `failed` once it has been due for the
worker's `--unrunnable-after-s`, on time: within a second of it, not at the next of
a fixed 30 s check (a real worker process, on every backend)."""

from __future__ import annotations

import runwright as rw
from runwright.runs import Run, RunState

from .harness import WorkerFleet, wait_until

AFTER_S = 2.0
# The rescuer wakes when the run comes due to close (Rescuer.next_look_in), so the close
# is late by a store round trip (a few ms on a quiet machine), and on a loaded one by the
# process's turn on a core: the setting plus one second, as the worker promises. A fixed
# 30 s check, or a look at the rescuer's next 0.5 s tick, is beyond it or close to it.
LATE_BY_AT_MOST_S = 1.0


async def test_an_unrunnable_run_closes_within_a_second_of_its_setting(app: rw.App, fleet: WorkerFleet):
    worker = fleet.start(args=["--unrunnable-after-s", str(AFTER_S)])
    await worker.wait_started()

    @app.task()
    async def needs_a_gpu(ctx: rw.Context) -> None:  # registered by no worker
        return None

    handle = await app.submit(needs_a_gpu)

    async def closed() -> Run | None:
        run = await app.store.run_get(handle.id)
        return run if run is not None and run.state is not RunState.QUEUED else None

    run = await wait_until(closed, "the unrunnable run is closed", timeout_s=20)
    assert run.state is RunState.FAILED and run.error_info()["type"] == "Unrunnable"
    # By the store's own times: due (unrunnable: no live worker registers its task) at
    # run_at, closed at finished_at.
    assert run.finished_at is not None
    late_s = run.finished_at - run.run_at - AFTER_S
    print(f"closed {late_s:+.3f} s after it had been due for {AFTER_S} s")
    assert -0.05 <= late_s <= LATE_BY_AT_MOST_S
