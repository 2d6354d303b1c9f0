"""Workers of one hostname in different pid namespaces (containers sharing a hostname,
`unshare --pid`, pods with hostNetwork) are not judged by each other's pids.

The contained worker runs in a pid namespace of its own, under a pid that no process of
this namespace has: a rescuer here that read that pid in its own namespace would find it
absent and take over a run that still runs (double execution). It is taken over once it
is really dead, by its mark, its heartbeat or its TTL, as any worker of another machine.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

import runwright as rw
from runwright.runs import Run, RunState
from runwright.store._liveness import hostname_of, pid_alive, this_machine

from ..conftest import PG_BASE
from ..pid_namespace import absent_pid, in_own_pid_namespace, require_pid_namespaces
from . import apps
from .harness import WorkerFleet, wait_until

pytestmark = pytest.mark.process

WATCHED_S = 3.0  # six rescue passes (every 0.5 s) of the worker of this namespace


async def running_on(app: rw.App, run_id: int) -> Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.state is RunState.RUNNING else None


async def cut_sessions(store_url: str, pid: int) -> int:
    """Cut every PostgreSQL session of the worker whose pid is `pid` in its namespace (as a
    restarted database or a proxy would): it is alive, and takes its mark again."""
    schema = store_url.split("schema=")[1]
    admin = await asyncpg.connect(PG_BASE)
    try:
        return int(await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            f"runwright:{schema}:{pid}"))
    finally:
        await admin.close()


async def test_a_worker_of_another_pid_namespace_is_taken_over_only_once_dead(
        app: rw.App, fleet: WorkerFleet, backend: str, store_url: str) -> None:
    require_pid_namespaces()
    pid = absent_pid()
    contained = fleet.start(concurrency=2, wrap=in_own_pid_namespace(pid))
    await contained.wait_started()
    handle = await app.submit(apps.hold, tag="contained")
    run = await wait_until(lambda: running_on(app, handle.id), "the run runs on the contained worker")
    holder = {w.id: w for w in await app.store.worker_list()}[run.owner]
    assert holder.pid == pid

    here = fleet.start(concurrency=2)
    await here.wait_started()
    assert not pid_alive(pid), "the contained worker's pid must be absent here for the test to mean anything"
    if backend == "postgres":  # its mark drops: only its grace keeps it, not its pid
        for _ in range(3):
            assert await cut_sessions(store_url, pid) > 0
            await asyncio.sleep(WATCHED_S / 3)
    else:
        await asyncio.sleep(WATCHED_S)
    still = await app.store.run_get(run.id)
    assert still is not None
    assert (still.state, still.fence, still.recoveries, still.owner) == (
        RunState.RUNNING, run.fence, 0, run.owner)
    assert fleet.events_by_run("start")[run.id] == [(run.fence, pid)]
    # What told them apart: its host names the machine and its pid namespace.
    assert holder.host != this_machine() and hostname_of(holder.host) == hostname_of(this_machine())
    assert holder.host.startswith(f"{hostname_of(this_machine())}~pid:[")

    contained.kill()  # SIGKILL of unshare: its --kill-child ends the namespace
    done = await asyncio.wait_for(app.wait_done(run.id), 90)
    assert done.state is RunState.SUCCEEDED and done.recoveries == 1
    assert done.value() == {"pid": here.pid, "fence": run.fence + 1}
    assert sorted(fleet.events_by_run("start")[run.id]) == [(run.fence, pid), (run.fence + 1, here.pid)]
    assert fleet.events_by_run("finished")[run.id] == [(run.fence + 1, here.pid)]
