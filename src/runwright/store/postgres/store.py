"""The PostgreSQL store (asyncpg).

Each store lives in its own schema (`?schema=` in the URL, default `runwright`), which also
namespaces its notification channels and its advisory-lock key, so several deployments or
test runs share one database without seeing each other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

import asyncpg

from ...errors import RunNotFound, SchemaError, StoreUnreachable, ThreadBusy, ThreadDeleted
from ...journal import Event, StepRecord
from ...runs import Run, RunState, check_transition, sources_of
from ...schedules import Schedule
from ..base import (
    DEFAULT_SCHEMA,
    EventAppendParams,
    QueueStat,
    RunClaimParams,
    RunExtendParams,
    RunExtendResult,
    RunFinishParams,
    RunInsertParams,
    RunListParams,
    RunRescueParams,
    StepRecordParams,
    ThreadAppendParams,
    WorkerInfo,
    WorkerRegisterParams,
    now_s,
)
from ..hub import CANCEL, QUEUED, Hub, done_topic, events_topic
from ..migrations import load_migrations
from ..rows import (
    RUN_COLUMNS,
    SCHEDULE_COLUMNS,
    cancelled_error,
    deadline_error,
    run_from_row,
    step_event_data,
    worker_lost_error,
)
from . import sql

__all__ = ["PostgresStore"]

log = logging.getLogger("runwright.store.postgres")
MIGRATIONS = load_migrations("runwright.store.postgres")
S = RunState
# Errors that mean "the connection or server went away": transient, worth a retry.
# InternalClientError is how asyncpg sometimes reports a session killed mid-operation
# (asyncpg issue #1069): the connection's protocol state is broken, so it is a disconnect.
TRANSIENT = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
             asyncpg.CannotConnectNowError, ConnectionError, asyncpg.InternalClientError,
             asyncpg.AdminShutdownError)


class PostgresStore:
    """Store on a PostgreSQL schema. See `runwright.store.base.Store`."""

    schema_version_known = MIGRATIONS[-1].version

    def __init__(self, url: str, dsn: str, schema: str = DEFAULT_SCHEMA, *,
                 pool_size: int = 10) -> None:
        if not schema.replace("_", "").isalnum():
            raise ValueError(f"schema name must be alphanumeric/underscore, got {schema!r}")
        self.url = url
        self.dsn = dsn
        self.schema = schema
        self.hub = Hub()
        self.lock_namespace = zlib.crc32(f"runwright:{schema}".encode()) & 0x7FFFFFFF
        self.channels = {name: f"runwright.{schema}.{name}"
                         for name in ("queued", "done", "cancel", "events")}
        self._pool_size = pool_size
        # application_name lets an operator (or a test) find this store's sessions.
        self._settings = {"search_path": schema, "application_name": f"runwright:{schema}"[:63]}
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncio.Task[None] | None = None
        self._worker_conns: dict[int, asyncpg.Connection] = {}

    # -- plumbing -------------------------------------------------------------------

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn, timeout=10, server_settings=self._settings)

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=self._pool_size, timeout=10,
                server_settings=self._settings, reset=_no_reset)
        except (TimeoutError, *TRANSIENT, asyncpg.PostgresError) as exc:
            raise StoreUnreachable(f"postgresql: cannot connect to {_safe(self.dsn)}: {exc}") from exc
        version = await self.schema_version()
        if version > self.schema_version_known:
            await self.close()
            raise SchemaError(
                f"schema {self.schema!r} has version {version}, newer than this runwright knows "
                f"({self.schema_version_known}); upgrade runwright. Nothing was written.")

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        for conn in list(self._worker_conns.values()):
            await _close_quietly(conn)
        self._worker_conns.clear()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        assert self._pool is not None, "store is not open"
        try:
            async with self._pool.acquire() as conn:
                try:
                    yield conn
                except TRANSIENT:
                    conn.terminate()  # never hand a half-broken session back to the pool
                    raise
        except TRANSIENT as exc:
            raise StoreUnreachable(f"postgresql: {type(exc).__name__}: {exc}") from exc

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._conn() as conn:
            return await conn.fetch(query, *args)

    async def _execute(self, query: str, *args: Any) -> str:
        async with self._conn() as conn:
            return await conn.execute(query, *args)

    async def _fetchval(self, query: str, *args: Any) -> Any:
        async with self._conn() as conn:
            return await conn.fetchval(query, *args)

    # -- schema ---------------------------------------------------------------------

    async def schema_version(self) -> int:
        exists = await self._fetchval("SELECT to_regclass($1) IS NOT NULL",
                                      f"{self.schema}.schema_versions")
        if not exists:
            return 0
        return await self._fetchval("SELECT coalesce(max(version), 0) FROM schema_versions")

    async def migrate(self) -> list[int]:
        async with self._conn() as conn, conn.transaction():
            # Concurrent migrators (several workers starting at once) take turns.
            await conn.execute("SELECT pg_advisory_xact_lock($1, 0)", self.lock_namespace)
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (version integer PRIMARY KEY,"
                               " name text NOT NULL, applied_at double precision NOT NULL)")
            current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions")
            if current > self.schema_version_known:
                raise SchemaError(f"schema {self.schema!r} is at {current}, "
                                  f"newer than {self.schema_version_known}")
            applied = []
            for migration in MIGRATIONS[current:]:
                await conn.execute(migration.sql)
                await conn.execute("INSERT INTO schema_versions VALUES ($1, $2, $3)",
                                   migration.version, migration.name, now_s())
                applied.append(migration.version)
            return applied

    async def require_schema(self) -> None:
        version = await self.schema_version()
        if version < self.schema_version_known:
            raise SchemaError(f"schema {self.schema!r} is at version {version}, this runwright "
                              f"needs {self.schema_version_known}: run `runwright migrate`")

    # -- notifications --------------------------------------------------------------

    async def listen(self) -> None:
        if self._listener is None:
            ready = asyncio.get_running_loop().create_future()
            self._listener = asyncio.get_running_loop().create_task(self._listen_forever(ready))
            await asyncio.wait([ready, self._listener], return_when=asyncio.FIRST_COMPLETED)

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
            lost = asyncio.get_running_loop().create_future()
            conn.add_termination_listener(lambda _c: lost.done() or lost.set_result(None))
            try:
                for channel in self.channels.values():
                    await conn.add_listener(channel, self._on_notify)
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
                self.hub.degraded = True
                self.hub.fire_all()
                await _close_quietly(conn)

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == self.channels["queued"]:
            self.hub.fire(QUEUED)
        elif channel == self.channels["cancel"]:
            self.hub.fire(CANCEL)
        elif payload == "*":
            self.hub.fire_all()
        else:
            topic = events_topic if channel == self.channels["events"] else done_topic
            self.hub.fire_many([topic(int(i)) for i in payload.split(",") if i])

    # -- runs -----------------------------------------------------------------------

    async def run_insert_many(self, params: Sequence[RunInsertParams]) -> list[Run]:
        if not params:
            return []
        now = params[0].now if params[0].now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            by_key = await self._insert(conn, params, now)
        self.hub.fire(QUEUED)
        return _in_order(params, by_key)

    async def _insert(self, conn: asyncpg.Connection, params: Sequence[RunInsertParams],
                      now: float) -> dict[str, Run]:
        columns = list(zip(*[(p.key, p.task, p.queue, p.priority, p.args, p.max_attempts,
                              p.timeout_s, p.run_at if p.run_at is not None else now, p.parent_id,
                              p.budget, p.deadline_at, p.thread, p.tenant) for p in params]))
        rows = await conn.fetch(sql.INSERT_MANY, *columns[:8], now, self.channels["queued"],
                                *columns[8:])
        by_key = {row[1]: run_from_row(row) for row in rows}
        missing = [p.key for p in params if p.key not in by_key]
        if missing:
            for row in await conn.fetch(sql.GET_BY_KEYS, missing):
                run = run_from_row(row)
                run.existed = True
                by_key[run.key] = run
        return by_key

    async def run_get(self, run_id: int) -> Run | None:
        rows = await self._fetch(sql.GET, run_id)
        return run_from_row(rows[0]) if rows else None

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]:
        return [run_from_row(r) for r in await self._fetch(sql.GET_MANY, list(run_ids))]

    async def run_list(self, params: RunListParams) -> list[Run]:
        where, args = ["true"], []
        if params.states:
            args.append([s.value for s in params.states])
            where.append(f"state = ANY(${len(args)}::text[])")
        for column in ("task", "queue", "thread", "tenant"):
            if getattr(params, column) is not None:
                args.append(getattr(params, column))
                where.append(f"{column} = ${len(args)}")
        if params.before_id is not None:
            args.append(params.before_id)
            where.append(f"id < ${len(args)}")
        if params.created_after is not None:
            args.append(params.created_after)
            where.append(f"created_at >= ${len(args)}::float8")
        if params.created_before is not None:
            args.append(params.created_before)
            where.append(f"created_at < ${len(args)}::float8")
        args.append(params.limit)
        rows = await self._fetch(f"SELECT {RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)}"
                                 f" ORDER BY id DESC LIMIT ${len(args)}", *args)
        return [run_from_row(row) for row in rows]

    async def run_count_by_state(self, tenant: str | None = None) -> dict[str, int]:
        return {state: count for state, count in await self._fetch(sql.COUNT_BY_STATE, tenant)}

    async def run_queue_stats(self, now: float,
                              tenant: str | None = None) -> list[QueueStat]:
        rows = await self._fetch(
            "SELECT queue, state, count(*), min(CASE WHEN state = 'queued' AND run_at <= $1 THEN run_at END)"
            " FROM runs WHERE $2::text IS NULL OR tenant = $2 GROUP BY queue, state", now, tenant)
        return [tuple(row) for row in rows]

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        now = params.now if params.now is not None else now_s()
        rows = await self._fetch(sql.CLAIM, list(params.queues), list(params.tasks), now,
                                 params.limit, params.worker_id, params.lease_s,
                                 self.channels["events"])
        runs = [run_from_row(row) for row in rows]
        runs.sort(key=lambda r: (r.priority, r.run_at, r.id))  # RETURNING has no order
        return runs

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        if not params.runs:
            return RunExtendResult()
        now = params.now if params.now is not None else now_s()
        ids, fences = zip(*params.runs)
        rows = await self._fetch(sql.EXTEND, now + params.lease_s, params.worker_id,
                                 list(ids), list(fences))
        kept = {row[0] for row in rows}
        return RunExtendResult(lost=[i for i in ids if i not in kept],
                               cancel_requested=[row[0] for row in rows if row[1]])

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        now = params[0].now if params[0].now is not None else now_s()
        columns = list(zip(*[(p.run_id, p.fence, p.state.value, p.result, p.error,
                              p.run_at if p.run_at is not None else now, p.release, p.kind,
                              p.event_data) for p in params]))
        async with self._conn() as conn, conn.transaction():
            rows = await conn.fetch(sql.FINISH_MANY, now, *columns, self.channels["done"],
                                    self.channels["queued"], self.channels["events"])
            parents = [row[2] for row in rows if row[2] is not None and row[1] != "queued"]
            if parents:
                await conn.fetchval(sql.WAKE_PARENTS, parents, now, self.channels["queued"])
            rolled_back = [row[0] for row in rows if row[1] == "interrupted" and row[5] == "rollback"]
            if rolled_back:
                await conn.execute("DELETE FROM thread_messages WHERE run_id = ANY($1::bigint[])",
                                   rolled_back)
            if any(row[3] is not None and row[1] != "queued" for row in rows):
                # A thread's run ended: the next run of its thread may be claimed now.
                await conn.execute("SELECT pg_notify($1, '')", self.channels["queued"])
        done = {row[0] for row in rows}
        refused = [p for p in params if p.run_id not in done]
        if refused:
            confirmed = {row[0] for row in await self._fetch(
                sql.FINISH_CONFIRM, [p.run_id for p in refused], [p.fence for p in refused],
                [p.state.value for p in refused])}
            refused = [p for p in refused if p.run_id not in confirmed]
        for p in params:
            self.hub.fire(QUEUED if p.state is S.QUEUED else done_topic(p.run_id))
            self.hub.fire(events_topic(p.run_id))
        return [p.run_id for p in refused]

    async def run_cancel(self, run_id: int, now: float | None = None) -> Run:
        now = now if now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            run = await _get_for_update(conn, run_id)
            if run.state is not S.RUNNING:
                check_transition(run_id, run.state, S.CANCELLED)
            family = [run_id] + [row[0] for row in await conn.fetch(sql.FAMILY, run_id)]
            for member in family:
                await self._cancel_one(conn, await _get_for_update(conn, member), now)
            run = await _get_for_update(conn, run_id)
        self.hub.fire_all()  # cancel, done and events topics of a whole family
        return run

    async def _cancel_one(self, conn: asyncpg.Connection, run: Run, now: float) -> None:
        if run.state is S.RUNNING and not run.cancel_requested:
            await conn.execute(sql.CANCEL_RUNNING, run.id)
            await conn.execute(sql.APPEND_EVENT, run.id, "cancel_requested", "{}", now)
            await conn.execute("SELECT pg_notify($1, $2)", self.channels["cancel"], str(run.id))
        elif run.state is S.QUEUED:
            await conn.execute(sql.CANCEL_QUEUED, run.id, now, cancelled_error(),
                               list(sources_of(S.CANCELLED)))
            await conn.execute(sql.APPEND_EVENT, run.id, "cancelled",
                               '{"reason":"cancelled on request"}', now)
            await conn.execute("SELECT pg_notify($1, $2)", self.channels["done"], str(run.id))
            if run.parent_id is not None:
                await conn.fetchval(sql.WAKE_PARENTS, [run.parent_id], now, self.channels["queued"])
        else:
            return
        await conn.execute("SELECT pg_notify($1, $2)", self.channels["events"], str(run.id))

    async def run_retry(self, run_id: int, now: float | None = None) -> Run:
        now = now if now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            run = await _get_for_update(conn, run_id)
            check_transition(run_id, run.state, S.QUEUED)
            await conn.execute(sql.RETRY, run_id, now, list(sources_of(S.QUEUED)))
            # A retry asked for by hand means "try again": journaled failures run again,
            # while completed steps keep their results.
            # An OutcomeUnknown stays: that call may have happened, and at-most-once means
            # never again.
            await conn.execute("DELETE FROM steps WHERE run_id = $1 AND status = 'failed'"
                               " AND coalesce(error::json->>'type', '') <> 'OutcomeUnknown'", run_id)
            await conn.execute(sql.APPEND_EVENT, run_id, "requeued",
                               json.dumps({"previous": run.state.value}), now)
            await conn.execute("SELECT pg_notify($1, '')", self.channels["queued"])
            await conn.execute("SELECT pg_notify($1, $2)", self.channels["events"], str(run_id))
            run = await _get_for_update(conn, run_id)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(run_id))
        return run

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]:
        now = params.now if params.now is not None else now_s()
        rows = await self._fetch(sql.RESCUE, self.lock_namespace, now, params.max_recoveries,
                                 worker_lost_error(params.max_recoveries + 1), self.channels["queued"])
        runs = [run_from_row(row) for row in rows]
        ended = [r for r in runs if r.done]
        if runs:
            async with self._conn() as conn, conn.transaction():
                await conn.execute("SELECT pg_notify($1, $2)", self.channels["events"],
                                   _id_payload(runs))
                if ended:
                    await conn.execute("SELECT pg_notify($1, $2)", self.channels["done"],
                                       _id_payload(ended))
                    parents = [r.parent_id for r in ended if r.parent_id is not None]
                    if parents:
                        await conn.fetchval(sql.WAKE_PARENTS, parents, now, self.channels["queued"])
        return runs

    async def run_expire_many(self, now: float | None = None) -> list[Run]:
        now = now if now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            runs = [run_from_row(row) for row in await conn.fetch(sql.EXPIRE, now, deadline_error())]
            if runs:
                await conn.execute("SELECT pg_notify($1, $2)", self.channels["done"], _id_payload(runs))
                await conn.execute("SELECT pg_notify($1, $2)", self.channels["events"], _id_payload(runs))
                parents = [r.parent_id for r in runs if r.parent_id is not None]
                if parents:
                    await conn.fetchval(sql.WAKE_PARENTS, parents, now, self.channels["queued"])
        return runs

    async def run_next_due_at(self, queues: Sequence[str], tasks: Sequence[str]) -> float | None:
        return await self._fetchval(sql.NEXT_DUE, list(queues), list(tasks))

    async def run_count_due_by_task(self, queues: Sequence[str], due_before: float) -> dict[str, int]:
        return dict(await self._fetch(sql.COUNT_DUE_BY_TASK, list(queues), due_before))

    # -- threads ----------------------------------------------------------------------

    async def run_insert_threaded(self, params: RunInsertParams, on_busy: str) -> Run:
        now = params.now if params.now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            await conn.execute(sql.THREAD_LOCK, params.thread, now)
            if await conn.fetchval(sql.THREAD_FOR_UPDATE, params.thread) is not None:
                raise ThreadDeleted(f"thread {params.thread!r} was deleted")
            existing = await conn.fetchrow(f"SELECT {RUN_COLUMNS} FROM runs WHERE key = $1", params.key)
            if existing is not None:
                run = run_from_row(existing)
                run.existed = True
                return run
            open_runs = [run_from_row(r) for r in await conn.fetch(sql.THREAD_OPEN_RUNS, params.thread)]
            if open_runs and on_busy == "reject":
                raise ThreadBusy(params.thread, open_runs[0].id, open_runs[0].state.value)
            if on_busy in ("interrupt", "rollback"):
                for run in open_runs:
                    await self._interrupt(conn, run, on_busy, now)
            by_key = await self._insert(conn, [params], now)
        self.hub.fire_all()
        return by_key[params.key]

    async def _interrupt(self, conn: asyncpg.Connection, run: Run, mode: str, now: float) -> None:
        """A running run stops at its next step boundary; a queued one ends at once."""
        if run.state is S.RUNNING:
            await conn.execute(sql.INTERRUPT_RUNNING, run.id, mode)
            await conn.execute(sql.APPEND_EVENT, run.id, "interrupt_requested",
                               json.dumps({"mode": mode}), now)
            await conn.execute("SELECT pg_notify($1, $2)", self.channels["cancel"], str(run.id))
        else:
            await conn.execute(sql.INTERRUPT_QUEUED, run.id, mode, now)
            if mode == "rollback":
                await conn.execute("DELETE FROM thread_messages WHERE run_id = $1", run.id)
            await conn.execute(sql.APPEND_EVENT, run.id, "interrupted", json.dumps({"mode": mode}), now)
            await conn.execute("SELECT pg_notify($1, $2)", self.channels["done"], str(run.id))
        await conn.execute("SELECT pg_notify($1, $2)", self.channels["events"], str(run.id))

    async def thread_messages(self, thread: str, before_run: int | None = None) -> list[tuple[int, int, str]]:
        async with self._conn() as conn:
            deleted = await conn.fetchrow("SELECT deleted_at FROM threads WHERE id = $1", thread)
            if deleted is not None and deleted[0] is not None:
                raise ThreadDeleted(f"thread {thread!r} was deleted")
            rows = await conn.fetch(sql.THREAD_MESSAGES, thread,
                                    before_run if before_run is not None else 2**62)
        return [tuple(row) for row in rows]

    async def thread_append(self, params: ThreadAppendParams) -> bool:
        now = params.now if params.now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            if await conn.fetchval(sql.OWNS_RUN, params.run_id, params.fence) is None:
                return False
            await conn.execute(sql.THREAD_APPEND, params.thread, params.run_id, params.idx,
                               params.message, now)
        return True

    async def thread_forget_run(self, run_id: int, fence: int) -> bool:
        async with self._conn() as conn, conn.transaction():
            if await conn.fetchval(sql.OWNS_RUN, run_id, fence) is None:
                return False
            await conn.execute("DELETE FROM thread_messages WHERE run_id = $1", run_id)
        return True

    async def thread_delete(self, thread: str, purge: bool, now: float | None = None) -> bool:
        now = now if now is not None else now_s()
        async with self._conn() as conn, conn.transaction():
            status = await conn.execute(
                "UPDATE threads SET deleted_at = coalesce(deleted_at, $2) WHERE id = $1", thread, now)
            if purge:
                await conn.execute("DELETE FROM thread_messages WHERE thread_id = $1", thread)
        return status == "UPDATE 1"

    # -- journal and events ---------------------------------------------------------

    async def step_list(self, run_id: int) -> list[StepRecord]:
        return [StepRecord(*row) for row in await self._fetch(sql.LIST_STEPS, run_id)]

    async def step_record(self, params: StepRecordParams) -> bool:
        now = params.now if params.now is not None else now_s()
        rows = await self._fetch(sql.RECORD_STEP, params.run_id, params.fence, params.position,
                                 params.name, params.status, params.result, params.error, now,
                                 step_event_data(params), self.channels["events"])
        self.hub.fire(events_topic(params.run_id))
        if rows:
            return True
        return await self._fetchval(sql.STEP_CONFIRM, params.run_id, params.position, params.fence,
                                    params.name, params.status, params.result,
                                    params.error) is not None

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        now = params.now if params.now is not None else now_s()
        kinds, datas = zip(*params.events)
        rows = await self._fetch(sql.APPEND_EVENTS_FENCED, params.run_id, params.fence,
                                 list(kinds), list(datas), now, self.channels["events"])
        self.hub.fire(events_topic(params.run_id))
        return [row[0] for row in rows] or None

    async def event_list(self, run_id: int, after: int = 0, limit: int = 1000) -> list[Event]:
        rows = await self._fetch(sql.LIST_EVENTS, run_id, after, limit)
        return [Event(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    # -- schedules --------------------------------------------------------------------

    async def schedule_save(self, schedule: Schedule) -> Schedule:
        row = await self._fetch(sql.SCHEDULE_SAVE, schedule.name, *schedule.definition(),
                                schedule.paused, schedule.next_fire_at, schedule.created_at,
                                schedule.updated_at)
        return Schedule(*row[0])

    async def schedule_list(self) -> list[Schedule]:
        return [Schedule(*row) for row in await self._fetch(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name")]

    async def schedule_due(self, now: float) -> list[Schedule]:
        return [Schedule(*row) for row in await self._fetch(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE NOT paused AND next_fire_at <= $1"
            f" ORDER BY next_fire_at", now)]

    async def schedule_advance(self, name: str, expected_next: float, next_fire_at: float) -> bool:
        status = await self._execute("UPDATE schedules SET next_fire_at = $3 WHERE name = $1"
                                     " AND next_fire_at = $2", name, expected_next, next_fire_at)
        return status == "UPDATE 1"

    async def schedule_set_paused(self, name: str, paused: bool, next_fire_at: float | None = None) -> bool:
        status = await self._execute(
            "UPDATE schedules SET paused = $2, next_fire_at = coalesce($3, next_fire_at),"
            " updated_at = $4 WHERE name = $1", name, paused, next_fire_at, now_s())
        return status == "UPDATE 1"

    async def schedule_delete(self, name: str) -> bool:
        return await self._execute("DELETE FROM schedules WHERE name = $1", name) == "DELETE 1"

    # -- workers --------------------------------------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        """Register and take the worker's session-level advisory lock on a connection of
        its own: the lock lives exactly as long as that session, which is how others learn
        at once that this worker died."""
        now = params.now if params.now is not None else now_s()
        try:
            conn = await self._connect()
        except (TimeoutError, *TRANSIENT) as exc:
            raise StoreUnreachable(f"postgresql: cannot connect: {exc}") from exc
        try:
            async with conn.transaction():
                worker_id = await conn.fetchval(sql.WORKER_INSERT, params.host, params.pid,
                                                json.dumps(list(params.queues)),
                                                json.dumps(list(params.tasks)), now)
                # Taken inside the inserting transaction: whoever sees the row sees the lock.
                await conn.execute("SELECT pg_advisory_lock($1, $2)", self.lock_namespace, worker_id)
        except BaseException:
            await _close_quietly(conn)
            raise
        self._worker_conns[worker_id] = conn
        return worker_id

    async def worker_heartbeat(self, worker_id: int, now: float | None = None) -> bool:
        conn = self._worker_conns.get(worker_id)
        if conn is None or conn.is_closed():
            return False
        try:
            status = await conn.execute(sql.WORKER_HEARTBEAT, worker_id,
                                        now if now is not None else now_s())
        except TRANSIENT:
            # The session, and with it the lock, is gone: others may take our runs now.
            self._worker_conns.pop(worker_id, None)
            await _close_quietly(conn)
            return False
        return status == "UPDATE 1"

    async def worker_deregister(self, worker_id: int) -> None:
        conn = self._worker_conns.pop(worker_id, None)
        try:
            async with self._conn() as pooled:
                await pooled.execute(sql.WORKER_DELETE, worker_id)
        finally:
            if conn is not None:
                await _close_quietly(conn)

    async def worker_list(self) -> list[WorkerInfo]:
        return [WorkerInfo(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), r[5], r[6])
                for r in await self._fetch(sql.WORKER_LIST)]


async def _no_reset(_conn: asyncpg.Connection) -> None:
    """The pool's default reset (UNLISTEN *, RESET ALL, unlock all ...) costs a round trip
    on every release. Pooled connections never LISTEN, hold session locks or change
    settings here (those live on connections of their own), so there is nothing to reset."""


def _id_payload(runs: Sequence[Run]) -> str:
    """Run ids for a notification; '*' (everyone re-reads) past the 8000-byte payload limit."""
    ids = ",".join(str(r.id) for r in runs)
    return ids if len(ids) < sql.PAYLOAD_LIMIT else "*"


def _in_order(params: Sequence[RunInsertParams], by_key: dict[str, Run]) -> list[Run]:
    """Runs in the caller's order; a key repeated within one batch maps to one run."""
    seen: set[str] = set()
    out = []
    for p in params:
        run = by_key[p.key]
        if p.key in seen and not run.existed:
            run = Run(**{f: getattr(run, f) for f in run.__slots__})
            run.existed = True
        seen.add(p.key)
        out.append(run)
    return out


async def _get_for_update(conn: asyncpg.Connection, run_id: int) -> Run:
    row = await conn.fetchrow(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 FOR UPDATE", run_id)
    if row is None:
        raise RunNotFound(f"run {run_id} not found")
    return run_from_row(row)


async def _close_quietly(conn: asyncpg.Connection) -> None:
    try:
        await asyncio.wait_for(conn.close(), 2)
    except Exception:
        conn.terminate()


def _safe(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    if "@" in dsn and ":" in dsn.split("@", 1)[0].split("//", 1)[-1]:
        scheme, rest = dsn.split("//", 1)
        creds, host = rest.split("@", 1)
        return f"{scheme}//{creds.split(':', 1)[0]}:***@{host}"
    return dsn
