"""Taking over a dead worker's runs on PostgreSQL: woken by the death, not by a poll, and
never for a worker whose sessions were only cut.

The victim is a `runwright worker` process; the rescuer is a worker in this process whose
poll (`rescue_interval_s`) is a minute, so a takeover within seconds can only come from
its wake: PostgreSQL ends a dead process's session, and with it the worker's session
lock, on which the rescuer's watch waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import AsyncIterator

import asyncpg
import pytest

import runwright as rw
from runwright.runs import Run, RunState

from ..conftest import PG_BASE
from . import apps
from .harness import WorkerFleet, owner_pid, wait_until

pytestmark = [pytest.mark.process, pytest.mark.parametrize("backend", ["postgres"])]

POLL_S = 60.0  # the rescuer's poll: far beyond any wait of these tests
WAKE_BOUND_S = 20.0  # a takeover by wake: well inside the first poll (48 s at the earliest)


@contextlib.asynccontextmanager
async def rescuer(app: rw.App) -> AsyncIterator[rw.Worker]:
    """A worker in this process that polls for dead workers once a minute."""
    worker = app.worker(rescue_interval_s=POLL_S, poll_s=0.2, concurrency=2)
    started = asyncio.Event()
    task = asyncio.create_task(worker.run(ready=lambda _w: started.set()))
    await asyncio.wait([asyncio.create_task(started.wait()), task], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    try:
        yield worker
    finally:
        worker.stop()
        await task


async def running_on(app: rw.App, handle: rw.RunHandle) -> Run | None:
    run = await app.store.run_get(handle.id)
    return run if run is not None and run.state is RunState.RUNNING else None


async def watched(admin: asyncpg.Connection, app: rw.App, worker_id: int) -> bool:
    """Is a session waiting for the worker's mark (the rescuer's watch)?"""
    return bool(await admin.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid"
        " AND objid::bigint = $2 AND objsubid = 2 AND NOT granted",
        app.store.lock_namespace, worker_id))  # type: ignore[attr-defined]


async def marked(admin: asyncpg.Connection, app: rw.App, worker_id: int, session: str) -> bool:
    """Does a session named `session` (the worker process's own) hold the worker's mark?
    Any session would not do: the rescuer's watch is granted the lock for a moment as
    the worker's sessions are cut."""
    return bool(await admin.fetchval(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.classid = $1::oid AND l.objid::bigint = $2"
        " AND l.objsubid = 2 AND l.granted AND a.application_name = $3",
        app.store.lock_namespace, worker_id, session))  # type: ignore[attr-defined]


async def held_by_a_worker_process(app: rw.App, fleet: WorkerFleet, tag: str) -> tuple[Run, int]:
    """A held run running on a `runwright worker` process: the run, and that worker's pid."""
    victim = fleet.start(concurrency=2)
    await victim.wait_started()
    handle = await app.submit(apps.hold, tag=tag)
    run = await wait_until(lambda: running_on(app, handle), "the run runs on the worker process")
    assert await owner_pid(app, run) == victim.pid
    # Claimed is not begun: a worker killed before its function's first start leaves that
    # start to the survivor, which then holds instead of ending at once (apps.first_start).
    await wait_until(lambda: (fleet.ledger / f"started-{run.id}").exists(), "its first start has begun")
    return run, victim.pid


@pytest.fixture(autouse=True)
def ledger_here(fleet: WorkerFleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rescuer in this process runs the workers' tasks, which write the same ledger."""
    monkeypatch.setenv(apps.LEDGER_ENV, str(fleet.ledger))


async def test_a_sigkilled_worker_is_taken_over_on_its_session_end_not_at_a_poll(
        app: rw.App, fleet: WorkerFleet) -> None:
    run, _pid = await held_by_a_worker_process(app, fleet, "wake")
    (victim,) = fleet.workers
    admin = await asyncpg.connect(PG_BASE)
    try:
        async with rescuer(app):
            assert run.owner is not None
            await wait_until(lambda: watched(admin, app, run.owner), "the rescuer watches the victim's mark")
            victim.signal(signal.SIGKILL)
            assert await victim.wait_exit() == -signal.SIGKILL
            taken = await wait_until(
                lambda: _taken_over(app, run), "the run was taken over",
                timeout_s=WAKE_BOUND_S)
            assert taken.recoveries == 1 and taken.attempt == 1
            try:
                done = await asyncio.wait_for(app.wait_done(run.id), 30)
            except TimeoutError:  # say where the run stands (seen once, on a loaded machine)
                raise AssertionError(f"the run taken over did not end within 30 s: "
                                     f"{await app.store.run_get(run.id)!r}") from None
    finally:
        await admin.close()
    # Its second start (the survivor's, under the next fence) does not hold: it ends at once.
    assert done.state is RunState.SUCCEEDED
    assert done.value() == {"pid": os.getpid(), "fence": run.fence + 1}


async def test_a_worker_whose_sessions_are_cut_is_never_taken_over(app: rw.App, fleet: WorkerFleet,
                                                                 store_url: str) -> None:
    """Every session of the worker process is cut (as a restarted database or a proxy
    would) while another worker watches it: it takes its mark again, and loses nothing."""
    run, pid = await held_by_a_worker_process(app, fleet, "blips")
    assert run.owner is not None
    schema = store_url.split("schema=")[1]
    admin = await asyncpg.connect(PG_BASE)
    try:
        session = f"runwright:{schema}:{pid}"
        async with rescuer(app):
            await wait_until(lambda: marked(admin, app, run.owner, session), "the worker holds its mark")
            for _ in range(3):
                await wait_until(lambda: watched(admin, app, run.owner), "the rescuer watches its mark")
                cut = await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name = $1", session)
                assert cut > 0
                await wait_until(lambda: marked(admin, app, run.owner, session),
                                 "the worker took its mark again")
            # An absence is watched for a while: past the rescuer's grace, woken at each cut.
            await asyncio.sleep(1.0)
            after = await app.store.run_get(run.id)
            assert after is not None
            assert (after.state, after.fence, after.recoveries) == (RunState.RUNNING, run.fence, 0)
            fleet.release("blips")
            done = await asyncio.wait_for(app.wait_done(run.id), 30)
    finally:
        await admin.close()
    assert done.state is RunState.SUCCEEDED and done.value() == {"pid": pid, "fence": run.fence}


async def _taken_over(app: rw.App, run: Run) -> Run | None:
    now = await app.store.run_get(run.id)
    return now if now is not None and now.fence > run.fence else None
