"""The PostgreSQL store (asyncpg).

Each store lives in its own schema (`?schema=` in the URL, default `runwright`), which also
namespaces its notification channels and its advisory-lock key, so several deployments or
test runs share one database without seeing each other. The operations both SQL dialects
share are in `..sql.shared`; this module holds the connections and the dialect's half of
those, and composes the mixins of this folder: the hot path (one round trip each: `runs`,
`journal`), LISTEN/NOTIFY (`listening`), and the session-bound liveness mark of a worker
(`workers`).

Behind a transaction pooler (PgBouncer pool_mode=transaction and the like) the URL names
the pooler and `?direct=` the server itself: queries go through the pooler, with no
server-side prepared statement kept across statements; the liveness marks and LISTEN,
which must hold a session, go to the direct URL (see `pooling`).
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from contextlib import asynccontextmanager, suppress
from typing import Any, AsyncIterator, Callable, Sequence

import asyncpg

from ...core._clock import Clock, StoreClock
from ...core._waiting import halt
from ...errors import InvalidInput, SchemaError, StoreError, StoreUnreachable
from ...runs import Run
from .._bus import Bus
from .._hub import CHANNELS, Hub
from .._liveness import Unmarked, gone_here
from .._migrations import Migration, load_migrations, load_schema
from .._moved import refusal_in
from .._params import RunInsertParams, RunRescueParams
from ..sql._dialect import POSTGRES, Dialect
from ..sql._shared import SqlStore
from . import _sql as sql
from ._base import DELIVERED, SCHEMA_KEY, TRANSIENT
from ._foreign import caller_connection
from ._journal import PostgresJournal
from ._kept import Kept
from ._listening import PostgresListening
from ._marks import Marks
from ._own import OwnSession
from ._pooling import refuse_transaction_pooler, require_same_database
from ._pooling import safe_dsn as _safe
from ._runs import PostgresRuns
from ._signals import PostgresSignals
from ._watch import Watch
from ._workers import PostgresWorkers

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]

DEFAULT_SCHEMA = "runwright"  # the schema a URL without ?schema= uses

MIGRATIONS = load_migrations("runwright.store.postgres")
WHOLE_SCHEMA = load_schema("runwright.store.postgres", MIGRATIONS)
SWEEP_IDLE_S = 10  # the longest an unrunnable sweep may sit idle holding it
# A pooled session unused this long is closed: a burst grows the pools to their bounds
# (`pool_size`, and CLAIMING_SIZE beside), and once it has passed a worker is back to its
# steady state (its own session, its rescuer's waiter, the pool's kept session: README,
# "Sessions"). Short, as the reconnect a new burst pays is one round trip of a few.
POOL_IDLE_S = 2.0
CLAIMING_SIZE = 2  # the claiming pool's bound: claims run one or two at a time
OWN_SESSIONS = 2  # a worker's besides the pools: its own (_own.py), its rescuer's waiter
SESSIONS_AT_REST = OWN_SESSIONS + 1  # and the pool's kept session (see _kept.py)


class _Connection:
    """`SqlConnection` over an asyncpg connection; NOTIFY goes out when it commits.
    `prepare` turns a statement into this store's (dialect, schema-qualified names)."""

    dialect: Dialect = POSTGRES

    def __init__(self, conn: asyncpg.Connection, channels: dict[str, str],
                 prepare: Callable[[str], str]) -> None:
        self.raw = conn
        self._channels = channels
        self._prepare = prepare

    async def fetch(self, query: str, *args: Any) -> list[Sequence[Any]]:
        return list(await self.raw.fetch(self._prepare(query), *args))

    async def fetchrow(self, query: str, *args: Any) -> Sequence[Any] | None:
        return await self.raw.fetchrow(self._prepare(query), *args)  # type: ignore[no-any-return]

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.raw.fetchval(self._prepare(query), *args)

    async def execute(self, query: str, *args: Any) -> int:
        status = await self.raw.execute(self._prepare(query), *args)
        count = status.rsplit(" ", 1)[-1]  # "UPDATE 3", "INSERT 0 1", "SELECT 1"
        return int(count) if count.isdigit() else 0

    async def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        await self.raw.executemany(self._prepare(query), rows)

    async def notify(self, topic: str, run_ids: Sequence[int] = ()) -> None:
        await self.raw.execute("SELECT pg_notify($1, $2)", self._channels[topic], _id_payload(run_ids))


class PostgresStore(PostgresRuns, PostgresJournal, PostgresSignals, PostgresWorkers, PostgresListening,
                    SqlStore):
    """Store on a PostgreSQL schema. See `runwright.store._interface.Store`."""

    dialect = POSTGRES
    migrations = MIGRATIONS
    whole_schema = WHOLE_SCHEMA
    schema_version_known = MIGRATIONS[-1].version
    has_sessions = True  # named `runwright:<schema>:<pid>` (see sessions_cut)
    get_by_key = sql.GET_BY_KEY
    forget_keys = sql.FORGET_KEYS

    def __init__(self, url: str, dsn: str, schema: str = DEFAULT_SCHEMA, *,
                 pool_size: int = 10, direct_dsn: str | None = None,
                 clock: Clock | None = None) -> None:
        if not schema.replace("_", "").isalnum():
            raise ValueError(f"schema name must be alphanumeric/underscore, got {schema!r}")
        self.url = url
        self.dsn = dsn
        # What must hold a session (liveness marks, LISTEN) connects here; the same
        # server as `dsn` unless that is a transaction pooler.
        self.direct_dsn = direct_dsn or dsn
        self.pooled = direct_dsn is not None
        self.schema = schema
        self.where = f"schema {schema!r}"
        self.hub = Hub()
        # The database's clock judges leases and deadlines (see runwright.core._clock).
        self.clock = clock or StoreClock()
        # The key's first half: this schema's marks, distinct from another schema's in the
        # same database (pg_locks is filtered by database too, see _dead_worker_ids).
        self.lock_namespace = zlib.crc32(f"runwright:{schema}".encode()) & 0x7FFFFFFF
        self.channels = {name: f"runwright.{schema}.{name}"
                         for name in (*CHANNELS, DELIVERED)}
        self._pool_size = pool_size
        # application_name lets an operator (or a test) find this store's sessions, and
        # those of one process: `runwright:<schema>:<pid>`. No search_path: statements
        # name their schema (see sql.qualify).
        self.session_name = f"runwright:{schema}:{os.getpid()}"[:63]
        self._settings = {"application_name": self.session_name}
        self._pool: asyncpg.Pool | None = None
        self._kept: Kept | None = None  # one session of _pool, lent without the pool's work
        self._claiming: asyncpg.Pool | None = None  # see GENERIC_PLAN
        self._listener: asyncio.Task[None] | None = None
        self._listened: list[str] = []  # the channels (by name) the listener LISTENs to
        self._listener_ready: asyncio.Future[None] | None = None  # its first session listens
        self._listening: asyncpg.Connection | None = None  # its session, while it has one
        self._widening = asyncio.Lock()
        self._own = OwnSession(self._connect)  # the LISTENs' and the marks' (see _own.py)
        self._fleet_heard = {}
        self._hearing = []
        self._deaf = False
        self._lingering_here = {}
        self._marks = Marks(self._own, self.lock_namespace, TRANSIENT,
                            self._sql("SELECT EXISTS (SELECT 1 FROM workers WHERE id = $1)"))
        self._unmarked = Unmarked()
        self._watches: dict[int, Watch] = {}  # by the id of the worker whose rescuer waits

    # -- connections ----------------------------------------------------------------

    def _sql(self, statement: str) -> str:
        """A statement as this store sends it: in the dialect, with qualified names."""
        return sql.qualify(POSTGRES.prepare(statement), self.schema)

    async def _connect(self) -> asyncpg.Connection:
        """A session of its own on the server (the direct URL when there is one)."""
        return await asyncpg.connect(self.direct_dsn, timeout=10, server_settings=self._settings)

    async def open(self, create: bool = True) -> None:
        # Through a transaction pooler a named prepared statement outlives its server
        # session's turn with us (DuplicatePreparedStatementError on the next client);
        # with the cache off, asyncpg parses each statement in the round trip that runs it.
        cache = {"statement_cache_size": 0} if self.pooled else {}
        self._own.open()
        # The pool's first session is made while the URLs are checked: opening costs
        # one connection's time less (a tenth of opening a fresh database).
        pool = asyncio.ensure_future(self._create_pool(1, self._pool_size, self._settings, cache))
        made: asyncpg.Pool | BaseException
        try:
            try:
                await self._check_urls()
            finally:  # made or failed, the pool's task is never left behind
                (made,) = await asyncio.gather(pool, return_exceptions=True)
                self._pool = made if isinstance(made, asyncpg.Pool) else None
                self._kept = Kept(made) if isinstance(made, asyncpg.Pool) else None
            if isinstance(made, BaseException):
                raise made
            if not self.pooled:  # no session is made until a claim asks for one
                self._claiming = await self._create_pool(0, CLAIMING_SIZE, {**self._settings, **GENERIC_PLAN},
                                                         {})
        except asyncpg.InvalidCatalogNameError as exc:  # reached, but it has no such database
            await self.close()
            raise SchemaError(f"postgresql: {exc} at {_safe(self.dsn)}: create it first "
                              f"(CREATE DATABASE), then runwright migrate") from exc
        except (TimeoutError, *TRANSIENT, asyncpg.PostgresError) as exc:
            await self.close()
            raise StoreUnreachable(f"postgresql: cannot connect to {_safe(self.dsn)}: {exc}") from exc
        except BaseException:
            await self.close()
            raise
        try:
            async with self._conn() as conn:
                await self._observe_clock(conn)
            await self._check_schema_known()
        except BaseException:
            await self.close()
            raise

    async def _create_pool(self, min_size: int, max_size: int, settings: dict[str, str],
                           options: dict[str, Any]) -> asyncpg.Pool:
        pool: asyncpg.Pool = await asyncpg.create_pool(
            self.dsn, min_size=min_size, max_size=max_size, timeout=10, server_settings=settings,
            reset=_no_reset, max_inactive_connection_lifetime=POOL_IDLE_S, **options)
        return pool

    async def _check_urls(self) -> None:
        """ConfigError unless the URL (or, behind a pooler, the direct one) reaches a
        session of our own, and the direct URL the pooler's database."""
        if self.pooled:
            await refuse_transaction_pooler(self.direct_dsn, direct=True)
            await require_same_database(self.dsn, self.direct_dsn, self._connect)
        else:
            await refuse_transaction_pooler(self.dsn)

    async def _observe_clock(self, conn: asyncpg.Connection) -> None:
        """Measure this machine's clock against the database's (see StoreClock)."""
        if isinstance(self.clock, StoreClock):
            server_s = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
            self.clock.observe(server_s, time.time())

    async def sessions_cut(self) -> int:
        """Terminate this process's sessions on the server (its fleet bus has none of its
        own), as a cut network would (the blip `runwright verify --fleet` asks a member
        for): how many."""
        conn = await self._connect()
        try:
            return int(await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> "
                "pg_backend_pid() AND application_name = $1", self.session_name) or 0)
        finally:
            await conn.close()

    def bus(self, root: str) -> Bus:
        """The fleet's bus on this schema: LISTEN/NOTIFY and `fleet_slots`, on the store's
        own connections (its pool, its listening session)."""
        from ._bus import PostgresBus

        return PostgresBus(self, root)

    async def close(self) -> None:
        if self._listener is not None:
            await halt(self._listener)
            self._listener = None
        for watch in self._watches.values():
            await watch.close()
        self._watches.clear()
        await self._marks.close()
        await self._own.close()
        if self._kept is not None:
            await self._kept.close()
            self._kept = None
        for pool in (self._claiming, self._pool):
            if pool is not None:
                await pool.close()
        self._pool = self._claiming = None

    @asynccontextmanager
    async def _conn(self, pool: asyncpg.Pool | None = None) -> AsyncIterator[asyncpg.Connection]:
        """A session of `pool` (default: the store's, its kept session when free), its
        failures as StoreErrors."""
        pool = pool or self._pool
        assert pool is not None, "store is not open"
        try:
            async with (self._kept.lend() if pool is self._pool and self._kept else pool.acquire()) as conn:
                try:
                    yield conn
                except TRANSIENT:
                    # Never hand a half-broken session back to the pool; one the pool took
                    # back itself as it saw the session end refuses (InterfaceError).
                    with suppress(asyncpg.InterfaceError):
                        conn.terminate()
                    raise
        except TRANSIENT as exc:
            raise StoreUnreachable(f"postgresql: {type(exc).__name__}: {exc}") from exc
        except asyncpg.TransactionRollbackError as exc:
            # A deadlock or serialization failure: PostgreSQL rolled the transaction back
            # whole, so trying again is safe; the loops and finishes retry a StoreError.
            raise StoreError(f"postgresql: {type(exc).__name__}: {exc}") from exc
        except asyncpg.RaiseError as exc:
            # A write to a store `runwright move` sealed: its triggers raise the line.
            moved = refusal_in(str(exc))
            if moved is None:
                raise
            raise moved from exc

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[_Connection]:
        async with self._conn() as conn:
            yield _Connection(conn, self.channels, self._sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[_Connection]:
        async with self._conn() as conn, conn.transaction():
            yield _Connection(conn, self.channels, self._sql)

    async def _caller_sql(self, connection: Any) -> _Connection:
        conn = caller_connection(connection)
        # A connection to another database would fail at the first statement naming a
        # table of ours, mid-write: told apart first, in one line.
        if await conn.fetchval("SELECT to_regclass($1)", f'"{self.schema}".runs') is None:
            raise InvalidInput(f"connection= reaches no runwright schema {self.schema!r}: it must be a "
                               f"connection to the store's database")
        return _Connection(conn, self.channels, self._sql)

    def _rolled_back(self, exc: StoreError) -> bool:
        return isinstance(exc.__cause__, asyncpg.TransactionRollbackError)

    async def _fetch_raw(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._conn() as conn:
            return list(await conn.fetch(self._sql(query), *args))

    # -- the dialect's half of the shared operations ------------------------------------

    async def _insert_runs(self, conn: Any, params: Sequence[RunInsertParams], now: float) -> list[Run]:
        await self._check_parents(conn.raw, params)  # in the caller's transaction
        return await self._insert(conn.raw, params, now)

    async def _dead_worker_ids(self, conn: Any, params: RunRescueParams, now: float) -> list[int]:
        """Live workers are those whose session holds their advisory lock (see _marks.py):
        when a worker's process dies, PostgreSQL drops the lock at once. A worker of this
        machine (and pid namespace) whose process runs no more is dead then; any other (its process alive,
        or on another machine, where a cut session looks the same as a death) once its
        mark has stayed missing MISSING_GRACE_S, so a worker whose session was only cut
        takes its mark again meanwhile (see ..liveness). The lock key is this schema's
        namespace in this database (pg_locks spans all)."""
        rows = await conn.fetch(
            "SELECT id, host, pid FROM workers WHERE id NOT IN (SELECT objid::bigint FROM pg_locks"
            " WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
            self.lock_namespace)
        gone = [row[0] for row in rows if gone_here(row[1], row[2])]
        return self._unmarked.dead([row[0] for row in rows], now, gone)

    async def _unregister_dead(self, conn: Any, dead: list[int]) -> None:
        """A worker found dead (its mark free, see _dead_worker_ids) can take its mark
        again before the delete: its row must stay then. The delete re-checks each mark
        in the statement: it takes the free ones itself until commit (a worker retaking
        its mark meanwhile tries again, then finds its row gone, see _marks.py), and a mark
        held again keeps its worker's row, and so its runs."""
        await conn.execute(
            "DELETE FROM workers WHERE id IN (SELECT d.id FROM unnest($1::bigint[]) AS d(id)"
            " WHERE pg_try_advisory_xact_lock($2, d.id::int))", dead, self.lock_namespace)

    async def _text_columns(self, conn: Any) -> list[tuple[str, str]]:
        rows = await conn.fetch(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c "
            "WHERE c.table_schema = $1 AND c.data_type IN ('text', 'json', 'jsonb', 'character varying') "
            "AND c.table_name <> 'schema_versions' ORDER BY 1, 2", self.schema)
        return [(row[0], row[1]) for row in rows if row[0] in sql.TABLES]

    async def _lock_reclaimed(self, conn: Any) -> None:
        """Under read committed, two passes that both read the ranges would both rewrite
        them (the second collided on a range's first id, or dropped the first's ids): the
        rewrites take turns on the table, while readers of it go on (SHARE ROW EXCLUSIVE
        conflicts with itself and with writes, not with reads). Taken last in a pass, after
        its runs' rows, so it waits on no run and no run waits on it."""
        await conn.execute(f'LOCK TABLE "{self.schema}".reclaimed IN SHARE ROW EXCLUSIVE MODE')

    async def _hold_registrations(self, conn: Any) -> None:
        """Under read committed, an unrunnable sweep read the workers in one statement and
        closed the runs in later ones: a worker that registered in between saw the runs it
        had come for closed. Registrations take the schema's key shared (worker_register),
        a sweep takes it alone, only when its unlocked look found something to close (see
        run_fail_unrunnable_many): a registration waits for a sweep's commit, a few ms, and
        heartbeats, removals and claims never wait. A sweeper stopped in its transaction
        (SIGSTOP, a cut link the server has not noticed) is ended by the server after
        SWEEP_IDLE_S, so registrations never wait longer."""
        await conn.execute(f"SET LOCAL idle_in_transaction_session_timeout = '{SWEEP_IDLE_S * 1000}ms'")
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", self.lock_namespace, SCHEMA_KEY)

    async def _schema_table_exists(self, conn: Any) -> bool:
        return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL",
                                        f"{self.schema}.schema_versions"))

    async def _before_migrate(self, conn: Any) -> None:
        # Concurrent migrators (several workers starting at once) take turns.
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", self.lock_namespace, SCHEMA_KEY)
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
        # The migrations' DDL names no schema: for this transaction only, which a
        # transaction pooler keeps on one server session.
        await conn.execute(f'SET LOCAL search_path TO "{self.schema}"')

    async def _apply_migration(self, conn: Any, migration: Migration) -> None:
        await conn.raw.execute(migration.sql)


# The claim's sessions plan it once. PostgreSQL plans a prepared statement anew for every
# call while its generic plan (one for any values) looks dearer than the calls' own, and
# the claim's always does (its LIMIT and arrays unknown); yet both are the same walk of
# runs_due (see sql.CLAIM), and planning was a fifth of a claim of 64 (claim+finish of
# 64: 56 -> 49 µs of server CPU a run). Without JIT: a generic plan is costed for an
# unknown LIMIT, over the JIT thresholds once a million runs wait, and compiling took
# 0.5 s a claim (a claim is never long enough to repay compiling). Settings of these
# sessions only: elsewhere a statement's plan may rightly depend on its values. Not
# behind a transaction pooler, which refuses them at connect (and would lend the session
# to other clients).
GENERIC_PLAN = {"plan_cache_mode": "force_generic_plan", "jit": "off"}


async def _no_reset(_conn: asyncpg.Connection) -> None:
    """The pool's default reset (UNLISTEN *, RESET ALL, unlock all ...) costs a round trip
    on every release. Pooled connections never LISTEN, hold session locks or change
    settings here (those live on connections of their own), so there is nothing to reset;
    and behind a transaction pooler a reset would land on a session another client has."""


def _id_payload(run_ids: Sequence[int]) -> str:
    """Run ids for a notification; '*' (everyone re-reads) past the 8000-byte payload limit."""
    ids = ",".join(str(i) for i in run_ids)
    return ids if len(ids) < sql.PAYLOAD_LIMIT else "*"
