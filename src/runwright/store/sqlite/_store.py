"""The SQLite store: one file, many processes on one machine.

Two connections, each used from one dedicated thread (`connection`). The hot one runs the
hot path (`runs`, `hot_path`), every operation a Python function run whole on its thread,
and the plain reads. The shared one runs the operations written once for both SQL
dialects (`sql.shared`), whose transactions span several hops: they take turns on an
asyncio lock, and while one holds the write lock, the hot connection's writers wait on
SQLite's busy timeout like any other process's. SQLite has no LISTEN: `listening` polls
the file's version.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from ...core._clock import SYSTEM_CLOCK, Clock
from ...core._resilience import through_blinks
from ...core._waiting import halt
from ...errors import SchemaError, StoreUnreachable
from ...runs import Run
from .._bus import Bus
from .._hub import Hub
from .._liveness import gone_here
from .._migrations import Migration, load_migrations, load_schema
from .._params import RunInsertParams, RunRescueParams
from ..sql._dialect import SQLITE
from ..sql._shared import SqlStore
from . import _hot_path as hot_path
from ._connection import Connection, StoreThread
from ._listening import SqliteListening
from ._runs import SqliteRuns
from ._transactions import SqliteTransactions

__all__ = ["SqliteStore"]

MIGRATIONS = load_migrations("runwright.store.sqlite")
WHOLE_SCHEMA = load_schema("runwright.store.sqlite", MIGRATIONS)


class SqliteStore(SqliteRuns, SqliteTransactions, SqliteListening, SqlStore):
    """Store on one SQLite file (WAL mode). See `runwright.store._interface.Store`."""

    dialect = SQLITE
    migrations = MIGRATIONS
    whole_schema = WHOLE_SCHEMA

    async def _text_columns(self, conn: Any) -> list[tuple[str, str]]:
        # SQLite keeps text in a column of any declared type: every column but the
        # numeric ones.
        tables = [row[0] for row in await conn.fetch(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name <> 'schema_versions' ORDER BY name")]
        found = []
        for table in tables:
            for column in await conn.fetch(f"SELECT name, type FROM pragma_table_info('{table}')"):
                if str(column[1]).upper() not in ("INTEGER", "REAL", "BOOLEAN", "INT"):
                    found.append((table, column[0]))
        return found
    schema_version_known = MIGRATIONS[-1].version
    has_sessions = False  # embedded: no server, no session to cut

    def __init__(self, url: str, path: str, *, synchronous: str = "NORMAL",
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.url = url
        self.path = path
        self.where = path
        self.hub = Hub()
        self.clock = clock  # one machine, one clock: the system's is the store's
        self._synchronous = synchronous
        self._hot = StoreThread(path, "runwright-sqlite")
        self._shared = StoreThread(path, "runwright-sqlite-shared")
        self._shared_turn = asyncio.Lock()
        self._transacting = StoreThread(path, "runwright-sqlite-tx")  # the application's transactions
        self._transacting_turn = asyncio.Lock()
        self._poller: asyncio.Task[None] | None = None

    # -- connections ----------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout = 30000")
        # WAL: readers never block the writer and vice versa, which many processes need.
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode survives any process crash; only an OS crash or power loss may
        # lose the last commits. `?synchronous=full` in the URL trades speed for that.
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        return conn

    def _check_place(self, create: bool) -> None:
        """Refuse, before connecting, a file that cannot be or must not be made."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreUnreachable(f"sqlite: directory {directory} does not exist (from {self.url})")
        if not create and not os.path.exists(self.path):
            # Connecting would create an empty file that every later command takes for a
            # database: a reader (`runwright status` in the wrong folder) must leave none.
            raise SchemaError(f"no such database at {os.path.abspath(self.path)}; set RUNWRIGHT_URL "
                              f"or run `runwright migrate`")

    async def open(self, create: bool = True) -> None:
        self._check_place(create)
        try:
            for thread in (self._hot, self._shared):
                await thread.start(self._connect)
        except sqlite3.Error as exc:
            await self.close()  # a later open starts afresh
            raise StoreUnreachable(f"sqlite: cannot open {self.path}: {exc}") from exc
        # The file opened: a lock held by other processes (a burst of writers) is a blink
        # to ride out here too, not a failed start; a schema it cannot work with is said at
        # once (a SchemaError is a StoreError, which through_blinks would wait out).
        refused = await through_blinks(self._schema_refusal)
        if refused is not None:
            raise refused

    async def _schema_refusal(self) -> SchemaError | None:
        try:
            await self._check_schema_known()
        except SchemaError as exc:
            return exc
        return None

    def bus(self, root: str) -> Bus:
        """The fleet's bus in this file: `fleet_slots` and a polled `fleet_messages`, on a
        connection of its own."""
        from ._bus import SqliteBus

        return SqliteBus(self.path, root)

    async def close(self) -> None:
        if self._poller is not None:
            await halt(self._poller)
            self._poller = None
        for thread in (self._hot, self._shared, self._transacting):
            await thread.stop()

    async def sessions_cut(self) -> int:
        """None to cut: the database is a file this process opens itself."""
        return 0

    @asynccontextmanager
    async def between_transactions(self) -> AsyncIterator[None]:
        """Within it, no transaction of this process is open on the shared connection (the
        hot path's each commit within one call on its thread): a stall of the loop here
        (`runwright verify --fleet`'s) holds no write lock every other writer would wait on."""
        async with self._shared_turn:
            yield

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[Connection]:
        yield Connection(self._hot)  # WAL: a read sees committed data, never a half-done write

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Connection]:
        async with self._shared_turn:
            conn = Connection(self._shared)
            try:
                # Inside the try: a caller cancelled while BEGIN runs on the thread must
                # still roll back, or the next transaction on this connection cannot begin.
                await conn.execute("BEGIN IMMEDIATE")
                yield conn
                # Shielded: a caller cancelled while its COMMIT waited for the thread had
                # that COMMIT dropped from the thread's queue, never run, and the
                # transaction left open; the next BEGIN on this connection failed ("cannot
                # start a transaction within a transaction") and a worker's heartbeat died.
                await asyncio.shield(conn.execute("COMMIT"))
            except BaseException:
                # SQLite may have rolled back already (a full disk, an I/O error). Queued
                # on the same thread, this runs after a BEGIN or COMMIT still in flight
                # (a no-op after a COMMIT that went through); shielded, so that a second
                # cancel cannot drop it.
                await asyncio.shield(conn.call(lambda raw: raw.in_transaction and raw.execute("ROLLBACK")))
                raise

    # -- the dialect's half of the shared operations ------------------------------------

    async def _insert_runs(self, conn: Any, params: Sequence[RunInsertParams], now: float) -> list[Run]:
        return await conn.call(lambda raw: hot_path.insert_runs(raw, params, now))  # type: ignore[no-any-return]

    def _judged_here(self, given: float | None) -> float | None:
        # The system clock is the database's here: unless a time or a clock of its own was
        # injected, retention's ages are judged by SQLite's reading of it, in the statement.
        if given is None and self.clock is SYSTEM_CLOCK:
            return None
        return self.clock.judged(given)

    async def _dead_worker_ids(self, conn: Any, params: RunRescueParams, now: float) -> list[int]:
        """Workers share this machine: a dead one is found by its pid at once when it is
        of this pid namespace too (see ..liveness.gone_here), and any one whose heartbeat
        is stale (another container, or another host on a network file system) in time."""
        workers = await conn.fetch("SELECT id, host, pid, heartbeat_at FROM workers")
        return [worker_id for worker_id, host, pid, beat in workers
                if beat < now - params.worker_stale_s or gone_here(host, pid)]

    async def _schema_table_exists(self, conn: Any) -> bool:
        return await conn.fetchval("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                                   " AND name = 'schema_versions'") is not None

    async def _apply_migration(self, conn: Any, migration: Migration) -> None:
        for statement in _statements(migration.sql):
            await conn.execute(statement)


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements. Comments go first (they may hold `;`);
    our migrations keep `--` and `;` out of string literals."""
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [part.strip() for part in code.split(";") if part.strip()]
