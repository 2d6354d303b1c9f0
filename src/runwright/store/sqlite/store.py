"""The SQLite store.

One connection, used from one dedicated thread: every operation is a Python function run
whole on that thread, so a transaction (`BEGIN IMMEDIATE` ... `COMMIT`) never interleaves
with another coroutine's statements and never blocks the event loop while SQLite waits
for another process's write lock. (aiosqlite queues single statements; we need whole
transactions per hop, which this small executor gives in one round trip.)

Change notifications: SQLite has no LISTEN, so a poller reads `PRAGMA data_version`, which
changes whenever another connection commits, and wakes the hub; our own writes wake it
directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

from ...errors import SchemaError, StoreError, StoreUnreachable
from ...journal import Event, StepRecord
from ...runs import Run, RunState
from ...schedules import Schedule
from ..base import (
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
from ..hub import QUEUED, Hub, done_topic, events_topic
from ..migrations import load_migrations
from ..rows import RUN_COLUMNS, SCHEDULE_COLUMNS, run_from_row
from . import writes

__all__ = ["SqliteStore"]

T = TypeVar("T")
MIGRATIONS = load_migrations("runwright.store.sqlite")
POLL_INTERVAL_S = 0.005
S = RunState


def _json_list(values: Sequence[Any]) -> str:
    return json.dumps(list(values))


class SqliteStore:
    """Store on one SQLite file (WAL mode). See `runwright.store.base.Store`."""

    schema_version_known = MIGRATIONS[-1].version

    def __init__(self, url: str, path: str, *, synchronous: str = "NORMAL") -> None:
        self.url = url
        self.path = path
        self.hub = Hub()
        self._synchronous = synchronous
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="runwright-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._poller: asyncio.Task[None] | None = None
        self._host = socket.gethostname()

    # -- plumbing -------------------------------------------------------------------

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, self._conn)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"sqlite {self.path}: {exc}") from exc

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
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

        return await self._call(transaction)

    def _connect(self, _: Any) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=30.0)
        conn.execute("PRAGMA busy_timeout = 30000")
        # WAL: readers never block the writer and vice versa, which many processes need.
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode survives any process crash; only an OS crash or power loss may
        # lose the last commits. `?synchronous=full` in the URL trades speed for that.
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        return conn

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreUnreachable(f"sqlite: directory {directory} does not exist (from {self.url})")
        try:
            self._conn = await loop.run_in_executor(self._executor, self._connect, None)
        except sqlite3.Error as exc:
            raise StoreUnreachable(f"sqlite: cannot open {self.path}: {exc}") from exc
        version = await self.schema_version()
        if version > self.schema_version_known:
            raise SchemaError(
                f"{self.path} has schema version {version}, newer than this runwright knows "
                f"({self.schema_version_known}); upgrade runwright. Nothing was written.")

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        if self._conn is not None:
            await self._call(lambda conn: conn.close())
            self._conn = None
        self._executor.shutdown(wait=False)

    # -- schema ---------------------------------------------------------------------

    async def schema_version(self) -> int:
        def read(conn: sqlite3.Connection) -> int:
            exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' "
                                  "AND name='schema_versions'").fetchone()
            if not exists:
                return 0
            return conn.execute("SELECT coalesce(max(version), 0) FROM schema_versions").fetchone()[0]

        return await self._call(read)

    async def migrate(self) -> list[int]:
        def apply(conn: sqlite3.Connection) -> list[int]:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (version INTEGER PRIMARY KEY,"
                         " name TEXT NOT NULL, applied_at REAL NOT NULL)")
            current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_versions").fetchone()[0]
            if current > self.schema_version_known:
                raise SchemaError(f"{self.path} has schema {current}, newer than {self.schema_version_known}")
            applied = []
            for migration in MIGRATIONS[current:]:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_versions VALUES (?, ?, ?)",
                             (migration.version, migration.name, now_s()))
                applied.append(migration.version)
            return applied

        return await self._write(apply)

    async def require_schema(self) -> None:
        version = await self.schema_version()
        if version < self.schema_version_known:
            raise SchemaError(f"{self.path} has schema {version}, this runwright needs "
                              f"{self.schema_version_known}: run `runwright migrate`")

    # -- notifications --------------------------------------------------------------

    async def listen(self) -> None:
        if self._poller is None:
            # Read the starting version before returning: a commit made after listen()
            # returns must be seen as a change, never taken for the baseline.
            baseline = await self._call(_data_version)
            self._poller = asyncio.get_running_loop().create_task(self._poll_changes(baseline))

    async def _poll_changes(self, last: int) -> None:
        """Wake the hub when another process commits (PRAGMA data_version changes)."""
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            if not self.hub.has_waiters():
                continue
            try:
                version = await self._call(_data_version)
            except StoreError:
                continue  # the next poll retries; waiters re-read on their fallback timer
            if version != last:
                last = version
                self.hub.fire_all()

    # -- runs -----------------------------------------------------------------------

    async def run_insert_many(self, params: Sequence[RunInsertParams]) -> list[Run]:
        runs = await self._write(lambda conn: writes.insert_runs(conn, params))
        self.hub.fire(QUEUED)
        return runs

    async def run_get(self, run_id: int) -> Run | None:
        row = await self._call(lambda conn: conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone())
        return None if row is None else run_from_row(row)

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]:
        rows = await self._call(lambda conn: conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (_json_list(run_ids),)).fetchall())
        return [run_from_row(row) for row in rows]

    async def run_list(self, params: RunListParams) -> list[Run]:
        where, args = ["1=1"], []
        if params.states:
            where.append("state IN (SELECT value FROM json_each(?))")
            args.append(_json_list([s.value for s in params.states]))
        for column in ("task", "queue", "thread", "tenant"):
            if getattr(params, column) is not None:
                where.append(f"{column} = ?")
                args.append(getattr(params, column))
        if params.before_id is not None:
            where.append("id < ?")
            args.append(params.before_id)
        if params.created_after is not None:
            where.append("created_at >= ?")
            args.append(params.created_after)
        if params.created_before is not None:
            where.append("created_at < ?")
            args.append(params.created_before)
        sql = f"SELECT {RUN_COLUMNS} FROM runs WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?"
        rows = await self._call(lambda conn: conn.execute(sql, (*args, params.limit)).fetchall())
        return [run_from_row(row) for row in rows]

    async def run_count_by_state(self, tenant: str | None = None) -> dict[str, int]:
        rows = await self._call(lambda conn: conn.execute(
            "SELECT state, count(*) FROM runs WHERE ?1 IS NULL OR tenant = ?1 GROUP BY state",
            (tenant,)).fetchall())
        return {state: count for state, count in rows}

    async def run_queue_stats(self, now: float,
                              tenant: str | None = None) -> list[QueueStat]:
        rows = await self._call(lambda conn: conn.execute(
            "SELECT queue, state, count(*), min(CASE WHEN state = 'queued' AND run_at <= ?1 THEN run_at END)"
            " FROM runs WHERE ?2 IS NULL OR tenant = ?2 GROUP BY queue, state", (now, tenant)).fetchall())
        return [tuple(row) for row in rows]

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        now = params.now if params.now is not None else now_s()
        tasks = _json_list(params.tasks)
        # One probe per queue: `queue = ?` lets SQLite walk runs_due in claim order and stop
        # after `limit` rows; `queue IN (...)` would make it sort every queued run.
        # A thread's run waits while an earlier run of its thread is open: runs of one
        # thread never overlap.
        # Past its deadline, a run is the sweeper's to end, not a worker's to start.
        probe = ("SELECT id, priority, run_at FROM runs r WHERE state = 'queued' AND queue = ?1"
                 " AND run_at <= ?2 AND task IN (SELECT value FROM json_each(?3))"
                 " AND (deadline_at IS NULL OR deadline_at >= ?2)"
                 " AND (thread IS NULL OR NOT EXISTS (SELECT 1 FROM runs o WHERE o.thread = r.thread"
                 "  AND o.id < r.id AND o.state IN ('queued', 'running')))"
                 " ORDER BY priority, run_at, id LIMIT ?4")

        def due_ids(conn: sqlite3.Connection, limit: int) -> list[int]:
            found = [row for queue in params.queues
                     for row in conn.execute(probe, (queue, now, tasks, limit)).fetchall()]
            found.sort(key=lambda row: (row[1], row[2], row[0]))
            return [row[0] for row in found[:limit]]

        def claim(conn: sqlite3.Connection) -> list[Run]:
            # A read without the write lock first: idle pollers of many processes must not
            # queue up on BEGIN IMMEDIATE just to learn that nothing is due.
            if not due_ids(conn, 1):
                return []
            conn.execute("BEGIN IMMEDIATE")
            try:
                runs = writes.claim_ids(conn, due_ids(conn, params.limit), params.worker_id,
                                        params.lease_s, now)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return runs

        runs = await self._call(claim)
        runs.sort(key=lambda r: (r.priority, r.run_at, r.id))  # RETURNING has no order
        return runs

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        now = params.now if params.now is not None else now_s()
        wanted = [list(pair) for pair in params.runs]

        def extend(conn: sqlite3.Connection) -> list[tuple[int, int]]:
            return conn.execute(
                "UPDATE runs SET lease_expires_at = ? WHERE state = 'running' AND owner = ?"
                " AND (id, fence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))"
                " RETURNING id, cancel_requested",
                (now + params.lease_s, params.worker_id, json.dumps(wanted))).fetchall()

        rows = await self._write(extend) if wanted else []
        kept = {run_id for run_id, _ in rows}
        return RunExtendResult(
            lost=[run_id for run_id, _ in params.runs if run_id not in kept],
            cancel_requested=[run_id for run_id, flag in rows if flag],
        )

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        refused = await self._write(lambda conn: writes.finish_runs(conn, params)) if params else []
        self._fire_finished(params)
        return refused

    def _fire_finished(self, params: Sequence[RunFinishParams]) -> None:
        for p in params:
            self.hub.fire(QUEUED if p.state is S.QUEUED else done_topic(p.run_id))
            self.hub.fire(events_topic(p.run_id))

    async def run_cancel(self, run_id: int, now: float | None = None) -> Run:
        now = now if now is not None else now_s()
        run = await self._write(lambda conn: writes.cancel_run(conn, run_id, now))
        self.hub.fire_all()  # cancel, done and events topics of a whole family
        return run

    async def run_retry(self, run_id: int, now: float | None = None) -> Run:
        now = now if now is not None else now_s()
        run = await self._write(lambda conn: writes.retry_run(conn, run_id, now))
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(run_id))
        return run

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]:
        runs = await self._write(lambda conn: writes.rescue_runs(conn, params, self._host))
        if runs:
            self.hub.fire(QUEUED)
            self.hub.fire_many([done_topic(r.id) for r in runs if r.done])
            self.hub.fire_many([events_topic(r.id) for r in runs])
        return runs

    async def run_expire_many(self, now: float | None = None) -> list[Run]:
        now = now if now is not None else now_s()
        runs = await self._write(lambda conn: writes.expire_runs(conn, now))
        for run in runs:
            self.hub.fire(done_topic(run.id))
            self.hub.fire(events_topic(run.id))
        return runs

    async def run_next_due_at(self, queues: Sequence[str], tasks: Sequence[str]) -> float | None:
        return await self._call(lambda conn: conn.execute(
            "SELECT min(run_at) FROM runs WHERE state = 'queued'"
            " AND queue IN (SELECT value FROM json_each(?)) AND task IN (SELECT value FROM json_each(?))",
            (_json_list(queues), _json_list(tasks))).fetchone()[0])

    async def run_count_due_by_task(self, queues: Sequence[str], due_before: float) -> dict[str, int]:
        rows = await self._call(lambda conn: conn.execute(
            "SELECT task, count(*) FROM runs WHERE state = 'queued' AND run_at < ?"
            " AND queue IN (SELECT value FROM json_each(?)) GROUP BY task",
            (due_before, _json_list(queues))).fetchall())
        return dict(rows)

    # -- threads ----------------------------------------------------------------------

    async def run_insert_threaded(self, params: RunInsertParams, on_busy: str) -> Run:
        run = await self._write(lambda conn: writes.insert_threaded(conn, params, on_busy))
        self.hub.fire_all()  # queued, and the cancel watchers of interrupted runs
        return run

    async def thread_messages(self, thread: str, before_run: int | None = None) -> list[tuple[int, int, str]]:
        return await self._call(lambda conn: writes.thread_messages(conn, thread, before_run))

    async def thread_append(self, params: ThreadAppendParams) -> bool:
        now = params.now if params.now is not None else now_s()

        def append(conn: sqlite3.Connection) -> bool:
            if not writes.owns(conn, params.run_id, params.fence):
                return False
            conn.execute("INSERT INTO thread_messages (thread_id, run_id, idx, message, created_at)"
                         " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                         (params.thread, params.run_id, params.idx, params.message, now))
            return True

        return await self._write(append)

    async def thread_forget_run(self, run_id: int, fence: int) -> bool:
        def forget(conn: sqlite3.Connection) -> bool:
            if not writes.owns(conn, run_id, fence):
                return False
            conn.execute("DELETE FROM thread_messages WHERE run_id = ?", (run_id,))
            return True

        return await self._write(forget)

    async def thread_delete(self, thread: str, purge: bool, now: float | None = None) -> bool:
        now = now if now is not None else now_s()
        return await self._write(lambda conn: writes.delete_thread(conn, thread, purge, now))

    # -- journal and events ---------------------------------------------------------

    async def step_list(self, run_id: int) -> list[StepRecord]:
        rows = await self._call(lambda conn: conn.execute(
            "SELECT run_id, position, name, status, result, error, fence, created_at FROM steps"
            " WHERE run_id = ? ORDER BY position", (run_id,)).fetchall())
        return [StepRecord(*row) for row in rows]

    async def step_record(self, params: StepRecordParams) -> bool:
        recorded = await self._write(lambda conn: writes.record_step(conn, params))
        self.hub.fire(events_topic(params.run_id))
        return recorded

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        seqs = await self._write(lambda conn: writes.append_fenced(conn, params))
        self.hub.fire(events_topic(params.run_id))
        return seqs

    async def event_list(self, run_id: int, after: int = 0, limit: int = 1000) -> list[Event]:
        rows = await self._call(lambda conn: conn.execute(
            "SELECT run_id, seq, kind, data, at FROM events WHERE run_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?", (run_id, after, limit)).fetchall())
        return [Event(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    # -- schedules --------------------------------------------------------------------

    async def schedule_save(self, schedule: Schedule) -> Schedule:
        def save(conn: sqlite3.Connection) -> Schedule:
            conn.execute(
                f"INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES ({', '.join('?' * 14)})"
                f" ON CONFLICT (name) DO UPDATE SET"
                f" next_fire_at = CASE WHEN schedules.cron = excluded.cron AND schedules.tz = excluded.tz"
                f"  THEN schedules.next_fire_at ELSE excluded.next_fire_at END,"
                f" cron = excluded.cron, tz = excluded.tz, task = excluded.task, args = excluded.args,"
                f" queue = excluded.queue, priority = excluded.priority,"
                f" max_attempts = excluded.max_attempts, misfire = excluded.misfire,"
                f" catch_up_limit = excluded.catch_up_limit, updated_at = excluded.updated_at",
                _schedule_row(schedule))
            return Schedule(*conn.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = ?",
                                          (schedule.name,)).fetchone())

        return await self._write(save)

    async def schedule_list(self) -> list[Schedule]:
        rows = await self._call(lambda conn: conn.execute(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name").fetchall())
        return [_schedule(row) for row in rows]

    async def schedule_due(self, now: float) -> list[Schedule]:
        rows = await self._call(lambda conn: conn.execute(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE NOT paused AND next_fire_at <= ?"
            f" ORDER BY next_fire_at", (now,)).fetchall())
        return [_schedule(row) for row in rows]

    async def schedule_advance(self, name: str, expected_next: float, next_fire_at: float) -> bool:
        return await self._write(lambda conn: conn.execute(
            "UPDATE schedules SET next_fire_at = ? WHERE name = ? AND next_fire_at = ?",
            (next_fire_at, name, expected_next)).rowcount == 1)

    async def schedule_set_paused(self, name: str, paused: bool, next_fire_at: float | None = None) -> bool:
        return await self._write(lambda conn: conn.execute(
            "UPDATE schedules SET paused = ?, next_fire_at = coalesce(?, next_fire_at), updated_at = ?"
            " WHERE name = ?", (paused, next_fire_at, now_s(), name)).rowcount == 1)

    async def schedule_delete(self, name: str) -> bool:
        return await self._write(lambda conn: conn.execute(
            "DELETE FROM schedules WHERE name = ?", (name,)).rowcount == 1)

    # -- workers --------------------------------------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        now = params.now if params.now is not None else now_s()
        return await self._write(lambda conn: conn.execute(
            "INSERT INTO workers (host, pid, queues, tasks, started_at, heartbeat_at)"
            " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (params.host, params.pid, _json_list(params.queues), _json_list(params.tasks), now, now),
        ).fetchone()[0])

    async def worker_heartbeat(self, worker_id: int, now: float | None = None) -> bool:
        now = now if now is not None else now_s()
        changed = await self._write(lambda conn: conn.execute(
            "UPDATE workers SET heartbeat_at = ? WHERE id = ?", (now, worker_id)).rowcount)
        return changed == 1

    async def worker_deregister(self, worker_id: int) -> None:
        await self._write(lambda conn: conn.execute("DELETE FROM workers WHERE id = ?", (worker_id,)))

    async def worker_list(self) -> list[WorkerInfo]:
        rows = await self._call(lambda conn: conn.execute(
            "SELECT id, host, pid, queues, tasks, started_at, heartbeat_at FROM workers ORDER BY id"
        ).fetchall())
        return [WorkerInfo(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), r[5], r[6]) for r in rows]


def _data_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA data_version").fetchone()[0]


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements. Comments go first (they may hold `;`);
    our migrations keep `--` and `;` out of string literals."""
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [part.strip() for part in code.split(";") if part.strip()]


def _schedule_row(schedule: Schedule) -> tuple[Any, ...]:
    return (schedule.name, *schedule.definition(), schedule.paused, schedule.next_fire_at,
            schedule.created_at, schedule.updated_at)


def _schedule(row: Sequence[Any]) -> Schedule:
    schedule = Schedule(*row)
    schedule.paused = bool(schedule.paused)
    return schedule
