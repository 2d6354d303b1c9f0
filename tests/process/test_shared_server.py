"""Two deployments on one PostgreSQL server: one's workers never keep the other's alive.

A worker's liveness mark is a session advisory lock keyed by (the schema's namespace,
worker id), and pg_locks spans the whole server. A dead worker 1 of one deployment must
not look alive because worker 1 of another deployment holds its lock: in another database
(the same schema name, so the same key: only the database tells them apart), or in
another schema of the same database (the key's namespace tells them apart).
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import AsyncIterator

import asyncpg
import pytest

import runwright as rw
from runwright.runs import RunState

from ..conftest import PG_BASE
from . import apps
from .harness import WorkerFleet, client, wait_until

# Its share of the suite's PostgreSQL budget (tests/pg_budget.py): two
# deployments' worker processes and their clients.
pytestmark = pytest.mark.pg_connections(30)

LEASE_S = 60.0  # long: a takeover before it lapses came from the liveness mark


@pytest.fixture(params=["databases", "schemas"])
async def two_urls(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, str]]:
    """URLs of two deployments on the test server: (ours, the other one's)."""
    schema = f"rw_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_BASE)
    try:
        if request.param == "schemas":
            other = f"rw_test_{uuid.uuid4().hex[:12]}"
            yield f"{PG_BASE}?schema={schema}", f"{PG_BASE}?schema={other}"
            for name in (schema, other):
                await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            return
        database = f"rw_test_{uuid.uuid4().hex[:12]}"
        await admin.execute(f'CREATE DATABASE "{database}"')
        try:
            base = PG_BASE.rsplit("/", 1)[0]
            yield f"{PG_BASE}?schema={schema}", f"{base}/{database}?schema={schema}"
        finally:
            await admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await admin.close()


async def test_a_same_id_worker_elsewhere_does_not_keep_a_dead_one_alive(
        two_urls: tuple[str, str], tmp_path: Path) -> None:
    """Worker 1 of ours is SIGKILLed while worker 1 of the other deployment lives: its run
    is taken over while its lease has not lapsed by the database's clock."""
    url, other_url = two_urls
    (tmp_path / "ours").mkdir()
    (tmp_path / "other").mkdir()
    ours, theirs = WorkerFleet(url, tmp_path / "ours"), WorkerFleet(other_url, tmp_path / "other")
    app, other_app = client(url), client(other_url)
    try:
        await app.open()
        await other_app.open()
        live = theirs.start(lease_s=LEASE_S)
        victim = ours.start(lease_s=LEASE_S)
        await live.wait_started()
        await victim.wait_started()
        assert [(w.id, w.pid) for w in await other_app.store.worker_list()] == [(1, live.pid)]
        assert [(w.id, w.pid) for w in await app.store.worker_list()] == [(1, victim.pid)]

        handle = await app.submit(apps.hold, tag="kill")
        held = await wait_until(lambda: _running(app, handle.id), "worker 1 runs the held run")
        assert held.owner == 1 and held.lease_expires_at is not None
        await wait_until(lambda: handle.id in ours.events_by_run("start"), "the held run started")
        rescuer = ours.start(lease_s=LEASE_S)
        await rescuer.wait_started()

        victim.signal(signal.SIGKILL)
        assert await victim.wait_exit() == -signal.SIGKILL
        run = await wait_until(lambda: _done(app, handle.id), "the killed worker's run ends")
        assert await _database_now(url) < held.lease_expires_at, \
            "taken over through the liveness mark, before the lease lapsed"
        assert run.state is RunState.SUCCEEDED and run.recoveries == 1
        assert run.value()["pid"] == rescuer.pid
        assert not live.exited, "the other deployment's worker 1 lived throughout"
        assert [w.id for w in await other_app.store.worker_list()] == [1]
    finally:
        ours.kill_all()
        theirs.kill_all()
        print(ours.dump_logs(), theirs.dump_logs())
        await app.close()
        await other_app.close()


async def _running(app: rw.App, run_id: int) -> rw.Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.state is RunState.RUNNING else None


async def _done(app: rw.App, run_id: int) -> rw.Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None


async def _database_now(url: str) -> float:
    conn = await asyncpg.connect(url.split("?", 1)[0])
    try:
        return float(await conn.fetchval("SELECT extract(epoch FROM now())::float8"))
    finally:
        await conn.close()
