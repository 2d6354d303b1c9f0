"""The SQLite store: one file, many processes on one machine.

Two connections, each used from one dedicated thread. The hot one runs the hot path,
every operation a Python function run whole on its thread (a `BEGIN IMMEDIATE` ...
`COMMIT` never interleaves with another coroutine's statements, and the event loop never
blocks while SQLite waits for another process's write lock), and the plain reads. The
shared one runs the operations written once for both SQL dialects (`sql.shared`), whose
transactions span several hops: they take turns on an asyncio lock, and while one holds
the write lock, the hot connection's writers wait on SQLite's busy timeout like any
other process's.

Change notifications: SQLite has no LISTEN, so a poller reads `PRAGMA data_version`, which
changes whenever another connection commits, and wakes the hub; our own writes wake it
directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterable, Sequence, TypeVar

from ...core.clock import SYSTEM_CLOCK, Clock
from ...core.waiting import halt
from ...errors import SchemaError, StoreError, StoreUnreachable
from ...runs import Run
from .. import rules
from ..bus import Bus
from ..hub import QUEUED, Hub, events_topic
from ..liveness import gone_here
from ..migrations import Migration, load_migrations, load_schema
from ..params import (
    EventAppendParams,
    RunClaimParams,
    RunExtendParams,
    RunExtendResult,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    StepRecordParams,
)
from ..sql.dialect import SQLITE, Dialect
from ..sql.shared import SqlStore
from . import hot_path

__all__ = ["SqliteStore"]

T = TypeVar("T")
MIGRATIONS = load_migrations("runwright.store.sqlite")
WHOLE_SCHEMA = load_schema("runwright.store.sqlite", MIGRATIONS)
POLL_INTERVAL_S = 0.005


# The primary result codes of the errors that pass: another process holds the lock (BUSY,
# LOCKED, PROTOCOL), the disk or the file system failed or filled up (IOERR, FULL, CANTOPEN).
# These are the store's blinks, retried with backoff; any other OperationalError is raised
# as it is, at once.
BLINK_CODES = frozenset({5, 6, 10, 13, 14, 15})  # BUSY LOCKED IOERR FULL CANTOPEN PROTOCOL


def is_blink(exc: sqlite3.OperationalError) -> bool:
    """Whether the error may pass by itself (a lock, the disk), not a bug in a statement."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # raised by the sqlite3 module itself, not by SQLite: not a blink
        return False
    return code & 0xFF in BLINK_CODES  # extended codes carry the primary in the low byte


class _Thread:
    """One SQLite connection and the one thread that uses it. Each opening makes a thread
    of its own, so a store closed and opened again works (a shut-down executor takes no work)."""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        self.executor: ThreadPoolExecutor | None = None
        self.conn: sqlite3.Connection | None = None

    async def start(self, connect: Callable[[], sqlite3.Connection]) -> None:
        if self.executor is None:
            self.executor = ThreadPoolExecutor(1, thread_name_prefix=self.name)
        if self.conn is None:
            self.conn = await asyncio.get_running_loop().run_in_executor(self.executor, connect)

    async def stop(self) -> None:
        try:
            if self.conn is not None:
                await self.call(lambda conn: conn.close())
        finally:
            self.conn = None
            if self.executor is not None:
                self.executor.shutdown(wait=False)
                self.executor = None

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn, executor = self.conn, self.executor
        if conn is None or executor is None:
            raise StoreError(f"sqlite {self.path}: the store is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, fn, conn)
        except sqlite3.OperationalError as exc:
            if not is_blink(exc):
                raise  # a bug (no such column, a syntax error): retrying cannot help
            raise StoreError(f"sqlite {self.path}: {exc}") from exc

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` inside BEGIN IMMEDIATE: the write lock is taken up front, so two
        processes never both read and then both write (no upgrade deadlock)."""

        def transaction(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return out

        return await self.call(transaction)


class _Connection:
    """`SqlConnection` over one of the store's threads."""

    dialect: Dialect = SQLITE

    def __init__(self, thread: _Thread) -> None:
        self._thread = thread

    def _run(self, sql: str, args: Sequence[Any]) -> Callable[[sqlite3.Connection], sqlite3.Cursor]:
        prepared = SQLITE.prepare(sql)
        return lambda conn: conn.execute(prepared, tuple(args))

    async def fetch(self, sql: str, *args: Any) -> list[Sequence[Any]]:
        run = self._run(sql, args)
        return await self._thread.call(lambda conn: run(conn).fetchall())

    async def fetchrow(self, sql: str, *args: Any) -> Sequence[Any] | None:
        run = self._run(sql, args)
        return await self._thread.call(lambda conn: run(conn).fetchone())

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        run = self._run(sql, args)
        return await self._thread.call(lambda conn: run(conn).rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        prepared = SQLITE.prepare(sql)
        await self._thread.call(lambda conn: conn.executemany(prepared, [tuple(r) for r in rows]))

    async def notify(self, topic: str, run_ids: Sequence[int] = ()) -> None:
        """Other processes see the commit through their data-version poll."""

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a function of the raw connection (the hot path's, inside this transaction)."""
        return await self._thread.call(fn)


class SqliteStore(SqlStore):
    """Store on one SQLite file (WAL mode). See `runwright.store.interface.Store`."""

    dialect = SQLITE
    migrations = MIGRATIONS
    whole_schema = WHOLE_SCHEMA
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
        self._hot = _Thread(path, "runwright-sqlite")
        self._shared = _Thread(path, "runwright-sqlite-shared")
        self._shared_turn = asyncio.Lock()
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
        await self._check_schema_known()

    def bus(self, root: str) -> Bus:
        """The fleet's bus in this file: `fleet_slots` and a polled `fleet_messages`, on a
        connection of its own."""
        from .bus import SqliteBus

        return SqliteBus(self.path, root)

    async def close(self) -> None:
        if self._poller is not None:
            await halt(self._poller)
            self._poller = None
        for thread in (self._hot, self._shared):
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
    async def _reading(self) -> AsyncIterator[_Connection]:
        yield _Connection(self._hot)  # WAL: a read sees committed data, never a half-done write

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[_Connection]:
        async with self._shared_turn:
            conn = _Connection(self._shared)
            try:
                # Inside the try: a caller cancelled while BEGIN runs on the thread must
                # still roll back, or the next transaction on this connection cannot begin.
                await conn.execute("BEGIN IMMEDIATE")
                yield conn
            except BaseException:
                # SQLite may have rolled back already (a full disk, an I/O error). Queued
                # on the same thread, this runs after a BEGIN still in flight.
                await conn.call(lambda raw: raw.in_transaction and raw.execute("ROLLBACK"))
                raise
            await conn.execute("COMMIT")

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

    # -- notifications --------------------------------------------------------------

    async def listen(self, runs: bool = True) -> None:
        # One poll of the file's version serves every topic: `runs` changes nothing here.
        if self._poller is None:
            # Read the starting version before returning: a commit made after listen()
            # returns must be seen as a change, never taken for the baseline.
            baseline = await self._hot.call(_data_version)
            self._poller = asyncio.get_running_loop().create_task(self._poll_changes(baseline))

    async def _poll_changes(self, last: int) -> None:
        """Wake the hub when another connection commits (PRAGMA data_version changes)."""
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            if not self.hub.has_waiters():
                continue
            try:
                version = await self._hot.call(_data_version)
            except StoreError:
                continue  # the next poll retries; waiters re-read on their fallback timer
            if version != last:
                last = version
                self.hub.fire_all()

    # -- the hot path ---------------------------------------------------------------

    async def run_insert_many(self, items: Iterable[RunInsertParams]) -> list[Run]:
        params = list(items)
        if not params:
            return []
        now = self.clock.now(params[0].now)
        runs = await self._hot.write(lambda conn: hot_path.insert_runs(conn, params, now))
        self.hub.fire(QUEUED)
        return runs

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        due = _Due(params, self.clock.now(params.now))

        def claim(conn: sqlite3.Connection) -> list[Run]:
            # A read without the write lock first: idle pollers of many processes must not
            # queue up on BEGIN IMMEDIATE just to learn that nothing is due.
            if not due.ids(conn, 1):
                return []
            conn.execute("BEGIN IMMEDIATE")
            try:
                runs = due.claim(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return runs

        return _in_claim_order(await self._hot.call(claim))

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        # One write transaction, one trip to the store's thread: the claim sees the
        # queue as the finishes leave it.
        if not params:
            return [], await self.run_claim(claim)
        now, due = self.clock.now(params[0].now), _Due(claim, self.clock.now(claim.now))
        refused, runs = await self._hot.write(
            lambda conn: (hot_path.finish_runs(conn, params, now), due.claim(conn)))
        self.hub.fire_finished(params)
        return refused, _in_claim_order(runs)

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        now = self.clock.now(params.now)
        wanted = json.dumps([list(pair) for pair in params.runs])

        def extend(conn: sqlite3.Connection) -> list[tuple[int, int]]:
            return conn.execute(
                "UPDATE runs SET lease_expires_at = ? WHERE state = 'running' AND owner = ?"
                " AND (id, fence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))"
                " RETURNING id, cancel_requested",
                (now + params.lease_s, params.worker_id, wanted)).fetchall()

        rows = await self._hot.write(extend) if params.runs else []
        kept = {run_id for run_id, _ in rows}
        return RunExtendResult(
            lost=[run_id for run_id, _ in params.runs if run_id not in kept],
            cancel_requested=[run_id for run_id, flag in rows if flag],
        )

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        now = self.clock.now(params[0].now)
        refused = await self._hot.write(lambda conn: hot_path.finish_runs(conn, params, now))
        self.hub.fire_finished(params)
        return refused

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        if not params:
            return []
        rules.check_one_step_per_run(params)
        now = self.clock.now(params[0].now)
        recorded = await self._hot.write(lambda conn: [hot_path.record_step(conn, p, now) for p in params])
        for p in params:
            self.hub.fire(events_topic(p.run_id))
        return recorded

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        now = self.clock.now(params.now)
        seqs = await self._hot.write(lambda conn: hot_path.append_fenced(conn, params, now))
        self.hub.fire(events_topic(params.run_id))
        return seqs


class _Due:
    """The due runs a claim takes, read in the write transaction that claims them."""

    # One probe per queue: `queue = ?` lets SQLite walk runs_due in claim order and stop
    # after `limit` rows; `queue IN (...)` would make it sort every queued run.
    # A thread's run waits while another run of its thread (same tenant) is running, or
    # queued ahead of it in the thread's order, (turn, id) (rules.thread_turn; a NULL turn
    # is the id): runs of one thread never overlap, and take their turns in order.
    # Past its deadline, a run is the rescuer's to end, not a worker's to start.
    # A queue the claim's fleet (?6, its root; NULL: none) paused yields nothing, for a
    # worker that has not heard of the pause too (a constant subquery: once per probe).
    REGISTERED = "SELECT 1 FROM workers WHERE id = ?"
    PROBE = ("SELECT id, priority, run_at FROM runs r WHERE state = 'queued' AND queue = ?1"
             " AND NOT EXISTS (SELECT 1 FROM fleet_paused_queues WHERE root = ?6 AND queue = ?1)"
             " AND run_at <= ?2 AND task IN (SELECT value FROM json_each(?3))"
             # Only a major the task's code can run (a run that recorded none: any).
             " AND (?5 IS NULL OR major IS NULL"
             "  OR major || ':' || task IN (SELECT value FROM json_each(?5)))"
             " AND (deadline_at IS NULL OR deadline_at >= ?2)"
             " AND (thread IS NULL OR NOT EXISTS (SELECT 1 FROM runs o WHERE o.thread = r.thread"
             "  AND o.tenant IS r.tenant AND o.id <> r.id AND o.state IN ('queued', 'running')"
             "  AND (o.state = 'running' OR coalesce(o.turn, o.id) < coalesce(r.turn, r.id)"
             "   OR (coalesce(o.turn, o.id) = coalesce(r.turn, r.id) AND o.id < r.id))))"
             " ORDER BY priority, run_at, id LIMIT ?4")

    def __init__(self, params: RunClaimParams, now: float) -> None:
        self.params = params
        self.now = now
        self.tasks = json.dumps(list(params.tasks))
        self.keys = None if params.majors is None else json.dumps(rules.claim_keys(params.majors))

    def ids(self, conn: sqlite3.Connection, limit: int) -> list[int]:
        found = [row for queue in self.params.queues for row in conn.execute(
            self.PROBE, (queue, self.now, self.tasks, limit, self.keys, self.params.fleet)).fetchall()]
        found.sort(key=lambda row: (row[1], row[2], row[0]))
        return [row[0] for row in found[:limit]]

    def claim(self, conn: sqlite3.Connection) -> list[Run]:
        """Inside a write transaction. Only a registered worker claims: one declared dead
        (its row deleted) that still runs takes nothing until its heartbeat registers it
        again (a rescuer's delete and this look take turns on the write lock)."""
        p = self.params
        if conn.execute(self.REGISTERED, (p.worker_id,)).fetchone() is None:
            return []
        return hot_path.claim_ids(conn, self.ids(conn, p.limit), p.worker_id, p.lease_s, self.now)


def _in_claim_order(runs: list[Run]) -> list[Run]:
    runs.sort(key=lambda r: (r.priority, r.run_at, r.id))  # RETURNING has no order
    return runs


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements. Comments go first (they may hold `;`);
    our migrations keep `--` and `;` out of string literals."""
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [part.strip() for part in code.split(";") if part.strip()]




