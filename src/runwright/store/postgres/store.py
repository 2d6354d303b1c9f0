"""The PostgreSQL store (asyncpg).

Each store lives in its own schema (`?schema=` in the URL, default `runwright`), which also
namespaces its notification channels and its advisory-lock key, so several deployments or
test runs share one database without seeing each other. The operations both SQL dialects
share are in `..sql.shared`; this module holds the connections, the hot path (one round
trip each), LISTEN/NOTIFY, and the session-bound liveness mark of a worker.

Behind a transaction pooler (PgBouncer pool_mode=transaction and the like) the URL names
the pooler and `?direct=` the server itself: queries go through the pooler, with no
server-side prepared statement kept across statements; the liveness marks and LISTEN,
which must hold a session, go to the direct URL (see `pooling`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import operator
import os
import time
import zlib
from contextlib import asynccontextmanager, suppress
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Sequence

import asyncpg

from ...clock import Clock, StoreClock
from ...errors import StoreError, StoreUnreachable
from ...runs import Run
from ...waiting import halt
from .. import rules
from ..bus import Bus
from ..hub import CANCEL, CHANNELS, QUEUED, RUN_CHANNELS, Hub, done_topic, events_topic
from ..liveness import Unmarked, gone_here
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
    WorkerHeartbeatParams,
    WorkerRegisterParams,
    WorkerWatchParams,
)
from ..sql import statements as q
from ..sql.columns import run_from_row, worker_row
from ..sql.dialect import POSTGRES, Dialect
from ..sql.shared import SqlStore
from . import sql
from .kept import Kept
from .marks import Marks, close_quietly
from .pooling import refuse_transaction_pooler, require_same_database
from .pooling import safe_dsn as _safe
from .watch import Watch

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]

DEFAULT_SCHEMA = "runwright"  # the schema a URL without ?schema= uses

log = logging.getLogger("runwright.store.postgres")
MIGRATIONS = load_migrations("runwright.store.postgres")
WHOLE_SCHEMA = load_schema("runwright.store.postgres", MIGRATIONS)
# Runs per statement when a batch is sent in chunks (_insert_pipelined).
INSERT_CHUNK = 200
# The schema's own advisory key, beside the workers' marks (whose keys are their ids, from
# 1): migrations and unrunnable sweeps take it alone, registrations shared.
SCHEMA_KEY = 0
SWEEP_IDLE_S = 10  # the longest an unrunnable sweep may sit idle holding it
# Errors that mean "the connection or server went away": transient, worth a retry.
# InternalClientError is how asyncpg sometimes reports a session killed mid-operation
# (asyncpg issue #1069): the connection's protocol state is broken, so it is a disconnect.
# TooManyConnectionsError: the server (or the role) is at its connection limit, which
# passes as other clients leave.
TRANSIENT = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
             asyncpg.CannotConnectNowError, ConnectionError, asyncpg.InternalClientError,
             asyncpg.AdminShutdownError, asyncpg.TooManyConnectionsError)


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


class PostgresStore(SqlStore):
    """Store on a PostgreSQL schema. See `runwright.store.interface.Store`."""

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
        # The database's clock judges leases and deadlines (see runwright.clock).
        self.clock = clock or StoreClock()
        # The key's first half: this schema's marks, distinct from another schema's in the
        # same database (pg_locks is filtered by database too, see _dead_worker_ids).
        self.lock_namespace = zlib.crc32(f"runwright:{schema}".encode()) & 0x7FFFFFFF
        self.channels = {name: f"runwright.{schema}.{name}"
                         for name in CHANNELS}
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
        self._marks = Marks(self._connect, self.lock_namespace, TRANSIENT,
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
                self._claiming = await self._create_pool(0, 2, {**self._settings, **GENERIC_PLAN}, {})
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
            reset=_no_reset, **options)
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
            sent_s = time.time()
            server_s = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
            self.clock.observe(server_s, sent_s, time.time())

    async def sessions_cut(self) -> int:
        """Terminate this process's sessions on the server, its fleet bus's too, as a cut
        network would (the blip `runwright verify --fleet` asks a member for): how many."""
        conn = await self._connect()
        try:
            return int(await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> "
                "pg_backend_pid() AND (application_name = $1 OR starts_with(application_name, $2))",
                self.session_name, f"runwright-fleet:{os.getpid()}:") or 0)
        finally:
            await conn.close()

    def bus(self, root: str) -> Bus:
        """The fleet's bus on this schema: LISTEN/NOTIFY and `fleet_slots`, on connections
        of its own to the session URL (the `direct=` one behind a transaction pooler)."""
        from .bus import PostgresBus

        return PostgresBus(self.direct_dsn, self.schema, root)

    async def close(self) -> None:
        if self._listener is not None:
            await halt(self._listener)
            self._listener = None
        for watch in self._watches.values():
            await watch.close()
        self._watches.clear()
        await self._marks.close()
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

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[_Connection]:
        async with self._conn() as conn:
            yield _Connection(conn, self.channels, self._sql)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[_Connection]:
        async with self._conn() as conn, conn.transaction():
            yield _Connection(conn, self.channels, self._sql)

    def _rolled_back(self, exc: StoreError) -> bool:
        return isinstance(exc.__cause__, asyncpg.TransactionRollbackError)

    async def _fetch_raw(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._conn() as conn:
            return list(await conn.fetch(self._sql(query), *args))

    # -- the dialect's half of the shared operations ------------------------------------

    async def _insert_runs(self, conn: Any, params: Sequence[RunInsertParams], now: float) -> list[Run]:
        return await self._insert(conn.raw, params, now)

    async def _dead_worker_ids(self, conn: Any, params: RunRescueParams, now: float) -> list[int]:
        """Live workers are those whose session holds their advisory lock (see marks.py):
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
        its mark meanwhile tries again, then finds its row gone, see marks.py), and a mark
        held again keeps its worker's row, and so its runs."""
        await conn.execute(
            "DELETE FROM workers WHERE id IN (SELECT d.id FROM unnest($1::bigint[]) AS d(id)"
            " WHERE pg_try_advisory_xact_lock($2, d.id::int))", dead, self.lock_namespace)

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

    # -- notifications --------------------------------------------------------------

    async def listen(self, runs: bool = True) -> None:
        if self._listener is None:
            self._listened = [name for name in self.channels if runs or name not in RUN_CHANNELS]
            loop = asyncio.get_running_loop()
            self._listener_ready = loop.create_future()
            self._listener = loop.create_task(self._listen_forever(self._listener_ready))
        # Returns once the first session listens (or could not: the hub is degraded).
        assert self._listener_ready is not None
        await asyncio.wait([self._listener_ready, self._listener], return_when=asyncio.FIRST_COMPLETED)
        if runs:
            await self._listen_to(RUN_CHANNELS)

    async def _listen_forever(self, ready: asyncio.Future[None]) -> None:
        """Keep one LISTEN connection; while it is down the hub is `degraded`, so
        pollers poll fast instead of trusting silence."""
        backoff_s = 0.1
        while True:
            try:
                conn = await self._connect()
            except (TimeoutError, *TRANSIENT, asyncpg.PostgresError) as exc:
                self.hub.degraded = True
                log.warning("listener cannot connect (%s); polling until it can", exc)
                if not ready.done():
                    ready.set_result(None)
                await asyncio.sleep(backoff_s)
                backoff_s = min(5.0, backoff_s * 2)
                continue
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def on_lost(_conn: asyncpg.Connection) -> None:
                if not lost.done():
                    lost.set_result(None)

            conn.add_termination_listener(on_lost)
            try:
                listened = 0  # the list may grow meanwhile (_listen_to): up to its end
                while listened < len(self._listened):
                    await conn.add_listener(self.channels[self._listened[listened]], self._on_notify)
                    listened += 1
                self._listening = conn
                self.hub.degraded = False
                backoff_s = 0.1
                if not ready.done():
                    ready.set_result(None)
                self.hub.fire_all()  # anything missed while down: everyone re-reads
                await lost
                log.warning("listener connection lost; polling until it is back")
            except TRANSIENT as exc:
                log.warning("listener failed: %s", exc)
            finally:
                self._listening = None
                self.hub.degraded = True
                self.hub.fire_all()
                await close_quietly(conn)

    async def _listen_to(self, names: Sequence[str]) -> None:
        """LISTEN to these channels too: on the listening session now, before this
        returns, and on every one after."""
        async with self._widening:  # one LISTEN at a time; a second caller waits for the first's
            new = [name for name in names if name not in self._listened]
            self._listened += new
            conn = self._listening
            if conn is None:  # between sessions: the next one LISTENs to them all
                return
            for name in new:
                try:
                    await conn.add_listener(self.channels[name], self._on_notify)
                except (*TRANSIENT, asyncpg.PostgresError) as exc:  # it is going: the next one listens
                    log.warning("listener could not LISTEN to %s: %s", name, exc)
                    # Ended here: asyncpg may never tell the listening loop of a session
                    # whose goodbye this statement half-read (see Marks.broken).
                    conn.terminate()
                    return

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == self.channels["queued"]:
            self.hub.fire(QUEUED)
        elif channel == self.channels["cancel"]:
            self.hub.fire(CANCEL)
        elif payload == "*":
            self.hub.fire_all()
        else:
            topic = events_topic if channel == self.channels["events"] else done_topic
            self.hub.fire_runs(topic, (int(i) for i in payload.split(",") if i))

    # -- the hot path ---------------------------------------------------------------

    async def run_insert_many(self, params: Iterable[RunInsertParams]) -> list[Run]:
        items = iter(params)  # pulling an item checks it (see scope)
        first = list(itertools.islice(items, INSERT_CHUNK))
        if not first:
            return []
        now = self.clock.now(first[0].now)
        # One item past the first chunk says whether there are more: the server gets the
        # first chunk before the second is pulled (checking a chunk of submit_many's items
        # took 0.8-1.5 ms, which the server spent waiting when both were pulled first).
        after = next(items, None)
        async with self._conn() as conn:
            if after is None:
                # No BEGIN/COMMIT around it (two round trips of three): the insert is one
                # statement, atomic by itself, and the read of keys that already existed
                # would see a snapshot of its own under READ COMMITTED inside a
                # transaction too.
                runs = await self._insert(conn, first, now, fresh=all(p.key_is_fresh for p in first))
            else:
                rest = _chunks(itertools.chain((after,), items), INSERT_CHUNK)
                runs = await self._insert_pipelined(conn, itertools.chain((first,), rest), now)
        self.hub.fire(QUEUED)
        return runs

    async def _insert(self, conn: asyncpg.Connection, params: Sequence[RunInsertParams],
                      now: float, fresh: bool = False) -> list[Run]:
        """`fresh`: every key was made for this submission (outside a transaction only: a
        collision fails the statement, and it is retried checking keys)."""
        rows, channel = None, self.channels["queued"]
        if fresh:
            try:
                if len(params) == 1:  # a submit: its values as parameters (see sql.INSERT_ONE)
                    statement, values = sql.INSERT_ONE, _insert_row(params[0], now)
                else:
                    statement, values = _fresh_insert(params, now)
                statement = sql.for_batch(statement, (p.parent_id for p in params))
                rows = await conn.fetch(self._sql(statement), *values, now, channel)
            except asyncpg.UniqueViolationError:
                pass  # a retry of an insert that committed: its runs are read below
        if rows is None:
            statement = sql.for_batch(sql.INSERT_MANY, (p.parent_id for p in params))
            rows = await conn.fetch(self._sql(statement), _insert_rows(params, now), now, channel)
        return await self._with_existing(conn, params, _made(params, rows, now))

    async def _insert_pipelined(self, conn: asyncpg.Connection, chunks: Iterable[Sequence[RunInsertParams]],
                                now: float) -> list[Run]:
        """A large batch in one transaction, a statement per chunk, each sent before the
        next chunk is pulled: the submitter checks and encodes chunk n+1 (about as long
        as the server takes to insert one) while the server inserts chunk n. An error
        pulling a chunk (a bad item) rolls back what was sent: nothing is written. A fresh
        chunk that collides (a retried insert) aborts the transaction, and the whole batch
        is then inserted again checking keys."""
        taken: list[RunInsertParams] = []
        try:
            async with conn.transaction():
                return await self._send_chunks(conn, chunks, now, taken)
        except asyncpg.UniqueViolationError:
            pass  # rolled back whole
        taken += [p for chunk in chunks for p in chunk]
        return await self._insert(conn, taken, now)

    async def _send_chunks(self, conn: asyncpg.Connection, chunks: Iterable[Sequence[RunInsertParams]],
                           now: float, taken: list[RunInsertParams]) -> list[Run]:
        """_insert_pipelined's loop; `taken` gathers the items pulled."""
        made: dict[tuple[str, str], Run] = {}
        sending: asyncio.Future[list[asyncpg.Record]] | None = None
        sent: Sequence[RunInsertParams] = ()  # the chunk `sending` inserts
        try:
            for chunk in chunks:
                taken += chunk
                if all(p.key_is_fresh for p in chunk):
                    statement, values = _fresh_insert(chunk, now)
                else:
                    statement, values = sql.INSERT_MANY, (_insert_rows(chunk, now),)
                statement = sql.for_batch(statement, (p.parent_id for p in chunk))
                args = (self._sql(statement), *values, now, self.channels["queued"])
                if sending is not None:
                    made.update(_made(sent, await sending, now))
                sending, sent = asyncio.ensure_future(conn.fetch(*args)), chunk
                await asyncio.sleep(0)  # it is sent before the next chunk is pulled
            if sending is not None:
                made.update(_made(sent, await sending, now))
            return await self._with_existing(conn, taken, made)
        finally:
            if sending is not None and not sending.done():
                # The transaction ends only once its session is idle again.
                await asyncio.gather(sending, return_exceptions=True)

    async def _with_existing(self, conn: asyncpg.Connection, params: Sequence[RunInsertParams],
                             found: dict[tuple[str, str], Run]) -> list[Run]:
        """The runs an insert made (`found`, by tenant and key) and, read here, those whose
        key already named one, in the caller's order."""
        missing: dict[str, list[str]] = {}
        for p in params:
            if (p.tenant or "", p.key) not in found:
                missing.setdefault(p.tenant or "", []).append(p.key)
        for tenant, keys in missing.items():
            for row in await conn.fetch(self._sql(sql.GET_BY_KEYS), tenant, keys):
                run = run_from_row(row)
                run.existed = True
                found[tenant, run.key] = run
        return _in_order(params, found)

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        async with self._conn(self._claiming) as conn:
            rows = await conn.fetch(self._sql(sql.CLAIM), *self._claim_args(params))
        return _claimed(rows)

    def _claim_args(self, params: RunClaimParams) -> tuple[Any, ...]:
        """CLAIM's $1..$9."""
        return (list(params.queues), list(params.tasks), self.clock.judged(params.now), params.limit,
                params.worker_id, params.lease_s, self.channels["events"],
                None if params.majors is None else rules.claim_keys(params.majors), params.fleet)

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        if not params.runs:
            return RunExtendResult()
        ids, fences = zip(*sorted(params.runs))  # rows locked in id order, as the rescuer's
        rows = await self._fetch_raw(sql.EXTEND, self.clock.judged(params.now), params.worker_id,
                                     list(ids), list(fences), params.lease_s)
        kept = {row[0] for row in rows}
        return RunExtendResult(lost=[i for i in ids if i not in kept],
                               cancel_requested=[row[0] for row in rows if row[1]])

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        if not params or not all(p.alone for p in params):
            return await self.run_finish_many(params), await self.run_claim(claim)
        # One statement (see sql.FINISH_CLAIM), on the claiming pool: the claim's plan
        # wants its settings (see GENERIC_PLAN), and on the store's own pool the whole
        # statement was planned anew at every call (server CPU 103 against 81 us a run,
        # batches of 40, alternated blocks).
        args = self._finish_args(params)
        async with self._conn(self._claiming) as conn:
            rows = await conn.fetch(self._sql(sql.FINISH_CLAIM), *args, *self._claim_args(claim))
        unwritten = set(rows[0][-2] or ())
        refused = await self._refused(params, {p.run_id for p in params} - unwritten)
        self.hub.fire_finished(params)
        return refused, _claimed([row for row in rows if row[0] is not None])

    def _finish_args(self, params: Sequence[RunFinishParams]) -> tuple[Any, ...]:
        """FINISH_MANY's $1..$5."""
        now = self.clock.now(params[0].now)
        # In id order, as renewals and the rescuer lock rows: a finish and a renewal of the
        # same runs in another session otherwise deadlock (seen under load; retried, slow).
        ends = json.dumps([(p.run_id, p.fence, p.state, p.result, p.error,
                            p.run_at if p.run_at is not None else now, p.release, p.kind,
                            p.event_data) for p in sorted(params, key=lambda p: p.run_id)])
        return now, ends, self.channels["done"], self.channels["queued"], self.channels["events"]

    async def _refused(self, params: Sequence[RunFinishParams], done: set[int]) -> list[int]:
        """The ids of `params` a finish did not write (not in `done`) and did not write
        before either (a retry after a lost reply): their fence was refused."""
        refused = [p for p in params if p.run_id not in done]
        if refused:
            confirmed = {row[0] for row in await self._fetch_raw(
                sql.FINISH_CONFIRM, [p.run_id for p in refused], [p.fence for p in refused],
                [p.state.value for p in refused])}
            refused = [p for p in refused if p.run_id not in confirmed]
        return [p.run_id for p in refused]

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        finish = self._finish_args(params)
        now, args = finish[0], (self._sql(sql.FINISH_MANY), *finish)
        if all(p.alone for p in params):
            # No BEGIN/COMMIT (two round trips of three): the statement is atomic by
            # itself, and no run of the batch has a parent to wake or a thread to go on.
            async with self._conn() as conn:
                rows = await conn.fetch(*args)
        else:
            async with self._conn() as conn, conn.transaction():
                rows = await conn.fetch(*args)
                await self._after_finish(conn, rows, now)
        refused = await self._refused(params, {row[0] for row in rows})
        self.hub.fire_finished(params)
        return refused

    async def _after_finish(self, conn: asyncpg.Connection, rows: list[asyncpg.Record], now: float) -> None:
        """What a batch of ends sets off: parents wake, a rolled-back run's thread
        messages go, and the next run of an ended run's thread may be claimed."""
        ended = [row for row in rows if row[1] != "queued"]
        parents = [row[2] for row in ended if row[2] is not None]
        if parents:
            await conn.execute(self._sql(q.WAKE_PARENTS), parents, now)
        rolled_back = [row[0] for row in ended if row[1] == "interrupted" and row[5] == "rollback"]
        if rolled_back:
            await conn.execute(self._sql(q.THREAD_FORGET_RUN), rolled_back)
        if parents or any(row[3] is not None for row in ended):
            await conn.execute("SELECT pg_notify($1, '')", self.channels["queued"])

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        if not params:
            return []
        rules.check_one_step_per_run(params)
        now = self.clock.now(params[0].now)
        # In run id order, as the finish batch and the renewals lock their runs.
        batch = json.dumps([[p.run_id, p.fence, p.position, p.name, p.status, p.result, p.error,
                             rules.step_event(p.position, p.name, p.status, p.error)]
                            for p in sorted(params, key=lambda p: p.run_id)])
        rows = await self._fetch_raw(sql.RECORD_STEPS, batch, now, self.channels["events"])
        recorded = {row[0] for row in rows}
        for p in params:
            self.hub.fire(events_topic(p.run_id))
        return [p.run_id in recorded or await self._step_confirmed(p) for p in params]

    async def _step_confirmed(self, p: StepRecordParams) -> bool:
        async with self._conn() as conn:
            return await conn.fetchval(self._sql(sql.STEP_CONFIRM), p.run_id, p.position, p.fence,
                                       p.name, p.status, p.result, p.error) is not None

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        now = self.clock.now(params.now)
        if params.mark is not None:
            return await self._append_marked(params, now)
        kinds, datas = zip(*params.events)
        rows = await self._fetch_raw(sql.APPEND_EVENTS_FENCED, params.run_id, params.fence,
                                     list(kinds), list(datas), now, self.channels["events"])
        self.hub.fire(events_topic(params.run_id))
        return [row[0] for row in rows] or None

    async def _append_marked(self, params: EventAppendParams, now: float) -> list[int] | None:
        ((kind, data),) = params.events
        (row,) = await self._fetch_raw(sql.APPEND_MARKED, params.run_id, params.fence, kind, data, now,
                                       params.mark, params.replayed, self.channels["events"])
        ours, appended, found = row[0], row[1], row[2]
        if appended is not None:
            self.hub.fire(events_topic(params.run_id))
            return [int(appended)]
        if not ours or (found is None and not params.replayed):  # refused (or lost meanwhile)
            return None
        return [] if found is None else [int(found)]

    # -- workers: a session-bound liveness mark -----------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        """Register and take the worker's session-level advisory lock on a connection of
        its own: the lock lives exactly as long as that session, which is how others learn
        at once that this worker died."""
        now = self.clock.now(params.now)
        try:
            conn = await self._connect()
        except (TimeoutError, *TRANSIENT) as exc:
            raise StoreUnreachable(f"postgresql: cannot connect: {exc}") from exc
        try:
            async with conn.transaction():
                # Shared with other registrations, never beside an unrunnable sweep (see
                # _hold_registrations): a sweep either sees this row or closed its runs first.
                await conn.execute("SELECT pg_advisory_xact_lock_shared($1, $2)",
                                   self.lock_namespace, SCHEMA_KEY)
                worker_id = await conn.fetchval(self._sql(q.WORKER_INSERT), *worker_row(params, now))
                # Taken inside the inserting transaction: whoever sees the row sees the lock.
                await conn.execute("SELECT pg_advisory_lock($1, $2)", self.lock_namespace, worker_id)
        except BaseException:
            await close_quietly(conn)
            raise
        self._marks.hold(int(worker_id), conn)
        return int(worker_id)

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        """False only when the worker was declared dead (it then registers again); a
        database that cannot be reached raises StoreUnreachable, which is no death."""
        conn = await self._marks.current(params.worker_id)
        if conn is None:
            return False
        try:
            await self._observe_clock(conn)
            status = await conn.execute(self._sql(q.WORKER_HEARTBEAT), params.worker_id,
                                        self.clock.now(params.now))
        except TRANSIENT as exc:
            self._marks.broken(params.worker_id, conn)
            raise StoreUnreachable(f"postgresql: heartbeat: {exc}") from exc
        return bool(status == "UPDATE 1")

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """Woken the moment the session of the worker this one watches ends (see
        watch.py), or when a missing mark's grace ends, else after `timeout_s`."""
        watch = self._watches.get(params.worker_id)
        if watch is None:
            await self._drop_watches()
            watch = self._watches[params.worker_id] = Watch(self._connect, self.lock_namespace, TRANSIENT)
        watch.start(params.worker_id)
        grace_left_s = self._unmarked.next_look_in(self.clock.now())
        if grace_left_s is not None and grace_left_s < params.timeout_s:
            await watch.wait(grace_left_s)
            return True
        return await watch.wait(params.timeout_s)

    async def _drop_watches(self) -> None:
        """Close the watches of workers whose mark this process holds no more (declared
        dead, a worker registered again under a new id): one session each, kept for nothing."""
        for worker_id in [wid for wid in self._watches if not self._marks.holds(wid)]:
            await self._watches.pop(worker_id).close()

    async def worker_deregister(self, worker_id: int) -> None:
        try:
            await super().worker_deregister(worker_id)
        finally:
            await self._marks.release(worker_id)
            watch = self._watches.pop(worker_id, None)
            if watch is not None:
                await watch.close()


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


def _insert_row(p: RunInsertParams, now: float) -> tuple[Any, ...]:
    """One run's values in sql.INSERT_FIELDS' order: INSERT_ONE's $1..$16, a row of
    INSERT_MANY's JSON."""
    return (p.key, p.task, p.queue, p.priority, p.args, p.max_attempts, p.timeout_s,
            p.run_at if p.run_at is not None else now, p.parent_id, p.budget,
            p.deadline_at, p.thread, p.tenant, p.traceparent, p.version, p.major)


def _insert_rows(params: Sequence[RunInsertParams], now: float) -> str:
    """The $1 of INSERT_MANY and INSERT_FRESH."""
    return json.dumps([_insert_row(p, now) for p in params])


# A row of _insert_row's: the fields its run alone has (sql.PER_RUN), and the others.
_PER_RUN = [i for i, (name, _) in enumerate(sql.INSERT_FIELDS) if name in sql.PER_RUN]
_SHARED = operator.itemgetter(*(i for i in range(len(sql.INSERT_FIELDS)) if i not in _PER_RUN))


def _fresh_insert(params: Sequence[RunInsertParams], now: float) -> tuple[str, tuple[Any, ...]]:
    """The insert of a batch of fresh keys, and its values up to `now` and the channel:
    INSERT_UNIFORM when its runs differ only in sql.PER_RUN, else INSERT_FRESH."""
    rows = [_insert_row(p, now) for p in params]
    shared = _SHARED(rows[0])
    if all(_SHARED(row) == shared for row in rows):
        return sql.INSERT_UNIFORM, (*([row[i] for row in rows] for i in _PER_RUN), *shared)
    return sql.INSERT_FRESH, (json.dumps(rows),)


def _made(params: Sequence[RunInsertParams], rows: Sequence[asyncpg.Record],
          now: float) -> dict[tuple[str, str], Run]:
    """The runs an insert of `params` made, by tenant and key, from its rows: each run's
    place in `params` (from 1), its id and whether it was born cancelled."""
    made = {}
    for place, run_id, _, born_cancelled in rows:
        p = params[place - 1]
        run = p.as_run(run_id, now)
        made[p.tenant or "", p.key] = rules.born_cancelled_run(run, now) if born_cancelled else run
    return made


def _claimed(rows: Sequence[asyncpg.Record]) -> list[Run]:
    """The runs a claim's rows hold, in claim order (RETURNING has none)."""
    runs = [run_from_row(row) for row in rows]
    runs.sort(key=lambda r: (r.priority, r.run_at, r.id))
    return runs


def _chunks(items: Iterable[RunInsertParams], size: int) -> Iterator[list[RunInsertParams]]:
    """`items` in lists of `size`, pulled one list at a time."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _in_order(params: Sequence[RunInsertParams], found: dict[tuple[str, str], Run]) -> list[Run]:
    """Runs in the caller's order; a key repeated within one batch maps to one run."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in params:
        name = (p.tenant or "", p.key)
        run = found[name]
        if name in seen and not run.existed:
            run = Run(**{f: getattr(run, f) for f in run.__slots__})
            run.existed = True
        seen.add(name)
        out.append(run)
    return out
