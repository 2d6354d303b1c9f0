"""Behind PgBouncer in transaction mode: the worker core through a real pooler.

The test starts Debian's `pgbouncer` (scripts/test installs it) on a free port of its own,
pool_mode=transaction, in front of the test server. Queries go through it; the liveness
marks and LISTEN go to `?direct=`. Without a direct URL, a worker refuses to start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import AsyncIterator
from urllib.parse import quote, urlsplit

import asyncpg
import pytest

import runwright as rw
from runwright.errors import ConfigError
from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._params import EventListParams

from ..conftest import PG_BASE
from ..integration.conftest import running_worker
from ..ports import free_port
from . import apps
from .harness import APP_SPEC, DEADLINE_S, ROOT, WorkerFleet, client, wait_until
from .test_workers import all_done, all_in

# Its share of the suite's PostgreSQL budget (tests/pg_budget.py): PgBouncer's
# server pool (20) and the workers' direct sessions.
pytestmark = pytest.mark.pg_connections(30)

LEASE_S = 60.0  # long: a takeover before it lapses came from the liveness mark


@pytest.fixture
async def pooler() -> AsyncIterator[str]:
    """The URL of a PgBouncer (transaction pooling) in front of the test server's database."""
    server = urlsplit(PG_BASE)
    database = server.path.lstrip("/")
    # PgBouncer refuses to run as root: then it runs as the server's own account, with a
    # directory of its own (pytest's tmp_path is not open to other users).
    user = "postgres" if os.geteuid() == 0 else None
    directory = Path(tempfile.mkdtemp(prefix="rw-pgbouncer-"))
    port = free_port()
    (directory / "users.txt").write_text(f'"{server.username}" ""\n')
    (directory / "pgbouncer.ini").write_text(f"""
[databases]
{database} = host={server.hostname} port={server.port or 5432} dbname={database}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
logfile = {directory / "pgbouncer.log"}
""")
    if user is not None:
        for path in (directory, *directory.iterdir()):
            shutil.chown(path, user)
    proc = subprocess.Popen([shutil.which("pgbouncer") or "/usr/sbin/pgbouncer",
                             str(directory / "pgbouncer.ini")], user=user,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"postgresql://{server.username}@127.0.0.1:{port}/{database}"
    try:
        await wait_until(lambda: _answers(url, proc), "pgbouncer accepts connections")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=DEADLINE_S)
        print((directory / "pgbouncer.log").read_text(errors="replace"))
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"rw_test_{uuid.uuid4().hex[:12]}"
    yield name
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


async def test_the_worker_core_runs_through_a_transaction_pooler(
        pooler: str, schema: str, tmp_path: Path) -> None:
    """Submit, claim and complete; a takeover after SIGKILL through the liveness mark on
    the direct URL; and a follower in another process reading the run's log live."""
    url = f"{pooler}?schema={schema}&direct={quote(PG_BASE, safe='')}"
    app = client(url)
    fleet = WorkerFleet(url, tmp_path)
    try:
        await app.open()
        first = fleet.start(lease_s=LEASE_S)
        await first.wait_started()
        handles = await app.submit_many(apps.record, [{"n": n} for n in range(30)])
        runs = await wait_until(lambda: all_done(app, handles), "the runs end")
        assert [(r.state, r.value()) for r in runs] == [(RunState.SUCCEEDED, n) for n in range(30)]

        held = await app.submit(apps.hold, tag="pooled")
        follower = fleet.follow(held.id)
        (running,) = await wait_until(lambda: all_in(app, [held], {RunState.RUNNING}), "the run runs")
        await wait_until(lambda: held.id in fleet.events_by_run("start"), "the held run started")
        second = fleet.start(lease_s=LEASE_S)
        await second.wait_started()
        first.signal(signal.SIGKILL)
        assert await first.wait_exit() == -signal.SIGKILL
        (done,) = await wait_until(lambda: all_done(app, [held]), "the killed worker's run ends")
        assert running.lease_expires_at is not None
        assert await _database_now() < running.lease_expires_at, \
            "taken over through the liveness mark, before the lease lapsed"
        assert (done.state, done.recoveries, done.value()["pid"]) == (RunState.SUCCEEDED, 1, second.pid)

        assert await follower.wait_exit() == 0, follower.err_path.read_text()
        log = [(e.seq, e.kind) for e in await app.store.event_list(EventListParams(held.id))]
        assert follower.seen() == log, "the follower read the whole log, live, to its end"
        assert [kind for _, kind in log][-1] == "succeeded" and ("recovered" in dict(log).values())
        assert await second.stop() == 0
    finally:
        fleet.kill_all()
        print(fleet.dump_logs())
        await app.close()


def test_a_transaction_pooler_without_a_direct_url_is_refused_in_one_line(
        pooler: str, schema: str) -> None:
    env = {**os.environ, "COLUMNS": "80", apps.LEDGER_ENV: tempfile.gettempdir()}
    done = subprocess.run([sys.executable, "-m", "runwright", "worker", APP_SPEC, "--url",
                           f"{pooler}?schema={schema}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=DEADLINE_S)
    assert done.returncode == 2, f"exit code {done.returncode}, not 2 (a bad setting): {done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "transaction pooler" in lines[0] and "direct=" in lines[0], done.stderr


async def test_a_direct_url_must_be_the_server_the_pooler_serves(pooler: str, schema: str) -> None:
    other = PG_BASE.rsplit("/", 1)[0] + "/postgres"
    store = store_from_url(f"{pooler}?schema={schema}&direct={quote(other, safe='')}")
    with pytest.raises(ConfigError, match="reaches another server or database"):
        await store.open()
    store = store_from_url(f"{pooler}?schema={schema}&direct={quote(pooler, safe='')}")
    with pytest.raises(ConfigError, match="direct= must be the URL of the PostgreSQL server itself"):
        await store.open()
    with pytest.raises(ConfigError, match="direct= must be a postgresql:// URL"):
        store_from_url(f"{pooler}?schema={schema}&direct=redis://127.0.0.1:6379/0")
    with pytest.raises(ConfigError, match="schema belong on the main URL"):
        store_from_url(f"{pooler}?direct={quote(PG_BASE + '?schema=x', safe='')}")


async def _answers(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"pgbouncer exited with {proc.returncode}"
    try:
        conn = await asyncpg.connect(url, statement_cache_size=0, timeout=2)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    await conn.close()
    return True


async def _database_now() -> float:
    conn = await asyncpg.connect(PG_BASE)
    try:
        return float(await conn.fetchval("SELECT extract(epoch FROM now())::float8"))
    finally:
        await conn.close()




async def test_transactional_steps_and_submissions_go_through_a_transaction_pooler(
        pooler: str, schema: str) -> None:
    """runwright's tables and the application's in one database, both reached through
    PgBouncer in transaction mode (README: Exactly-once effects, set-up): a transactional
    step's write lands once across a replay; a run submitted, and a signal sent, in the
    application's own transaction through the pooler exist only if it commits, and the
    worker (which looks at the queue by itself once an hour) is woken at the commit."""
    app = rw.App(f"{pooler}?schema={schema}&direct={quote(PG_BASE, safe='')}")
    table = f'"{schema}".payments'
    calls: list[str] = []

    async def record(tx: asyncpg.Connection, order: str) -> int:
        calls.append(order)
        return int(await tx.fetchval(f"INSERT INTO {table} (id, n) VALUES ($1, 1) ON CONFLICT (id) "
                                     f"DO UPDATE SET n = payments.n + 1 RETURNING n", order))

    @app.task(retries=2, backoff=rw.Backoff(base_s=0.05))
    async def charge(ctx: rw.Context, order: str) -> object:
        paid = await ctx.transaction("record", record, order)
        if ctx.attempt == 1:
            raise ConnectionError("after the commit, before the run ended")
        return [paid, await ctx.wait_signal("go")]

    # The application's own connection through the pooler: no statement cache (a prepared
    # statement does not outlive a transaction there).
    conn = await asyncpg.connect(pooler, statement_cache_size=0)
    try:
        await app.open()
        await conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, n integer NOT NULL)")
        async with running_worker(app, poll_s=3600):
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    await app.submit(charge, order="dropped", key="dropped", connection=conn)
                    raise ZeroDivisionError
            async with conn.transaction():
                handle = await app.submit(charge, order="o-1", key="o-1", connection=conn)
                await app.signal(handle.id, "go", "went", connection=conn)
            assert await handle.result(timeout_s=DEADLINE_S) == [1, "went"]
        assert await app.list_runs(key="dropped") == []
        assert calls == ["o-1"]  # the replay returned the journaled 1 without calling record
        assert [tuple(row) for row in await conn.fetch(f"SELECT id, n FROM {table}")] == [("o-1", 1)]
    finally:
        await conn.close()
        await app.close()
