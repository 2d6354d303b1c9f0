"""The store operations both SQL dialects share, written once over `SqlConnection`.

A dialect (sqlite/, postgres/) gives connections (`_reading`, `_transaction`), its hot
path (submit, claim, renew, finish, journal and event appends, each one round trip
tuned for its database), how it tells a dead worker (`_dead_worker_ids`), and how it
reads and applies schema versions. Everything else, which is where the rules are, lives
here: it asks `rules` for the decision and applies it in the transaction it read in.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from typing import Any, AsyncContextManager, Sequence

from ...clock import Clock
from ...errors import RunNotFound, StoreError, ThreadDeleted
from ...journal import Event, StepRecord, ThreadEvent
from ...questions import Question
from ...runs import Run, RunState
from ...schedules import Schedule
from .. import rules
from ..hub import QUEUED, Hub, events_topic
from ..migrations import Migration
from ..params import (
    BucketTakeParams,
    EndedTimes,
    EventListParams,
    EventsTrimmed,
    EventTrimParams,
    LeaseTakeParams,
    QuestionAnswerParams,
    QuestionListParams,
    QuestionOpenParams,
    QueuePauseParams,
    QueueStat,
    RunCancelParams,
    RunCountDueParams,
    RunCountParams,
    RunEndedParams,
    RunExpireParams,
    RunInsertParams,
    RunListParams,
    RunNextDueParams,
    RunQueueStatsParams,
    RunReclaimed,
    RunReclaimParams,
    RunRescueParams,
    RunRetryParams,
    RunUnrunnableParams,
    ScheduleAdvanceParams,
    ScheduleDueParams,
    SchedulePauseParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadForgetParams,
    ThreadGetParams,
    ThreadInfo,
    ThreadListParams,
    ThreadMessagesParams,
    ThreadMessagesTrimmed,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
    TombstonesReclaimed,
    UnrunnableKind,
    WorkerHeartbeatParams,
    WorkerInfo,
    WorkerRegisterParams,
    WorkerWatchParams,
)
from . import statements as q
from .columns import RUN_COLUMNS, run_from_row, schedule_from_row, worker_from_row, worker_row
from .dialect import Dialect, SqlConnection

__all__ = ["SqlStore"]

NO_RUN_BEFORE = 2**62  # "before run" when a thread's whole history is wanted
# Tries of an operation whose transaction the database rolled back for a conflict (a
# deadlock between overlapping cancels of one family, say) before its error is raised.
CONFLICT_RETRIES = 5


class SqlStore(ABC):
    """The shared half of a SQL store; see the module docstring for the dialect's half."""

    url: str
    hub: Hub
    clock: Clock
    dialect: Dialect
    migrations: list[Migration]
    whole_schema: Migration  # schema.sql: what the migrations build (see migrate)
    schema_version_known: int
    where: str  # names the database in messages ("schema 'x'", "file.db")
    # Where a run is found by its key, and what frees the keys of runs about to be removed:
    # an index on runs by default (its entries go with the rows); PostgreSQL keeps keys in
    # a table of their own (see its migration 16).
    get_by_key: str = q.GET_BY_KEY
    forget_keys: str | None = None
    # A claim as large as a worker's free slots: the database's other sessions (SQLite's
    # other processes between transactions) go on meanwhile, and a worker of 500 slots
    # drained 1.6x (PostgreSQL) and 1.5x (SQLite) as fast as one of 64, 2 workers each.
    claim_most: int | None = None

    # -- the dialect's half -------------------------------------------------------------

    @abstractmethod
    def _reading(self) -> AsyncContextManager[SqlConnection]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    def _transaction(self) -> AsyncContextManager[SqlConnection]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _insert_runs(self, conn: SqlConnection, params: Sequence[RunInsertParams],
                           now: float) -> list[Run]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _dead_worker_ids(self, conn: SqlConnection, params: RunRescueParams,
                               now: float) -> list[int]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _schema_table_exists(self, conn: SqlConnection) -> bool:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _apply_migration(self, conn: SqlConnection, migration: Migration) -> None:
        """The dialect's own (see the module docstring)."""

    async def _before_migrate(self, conn: SqlConnection) -> None:
        """Anything the dialect must do first in the migrating transaction (SQLite needs
        nothing; PostgreSQL takes the migrators' lock and makes its schema)."""
        return None

    # -- schema -------------------------------------------------------------------------

    async def schema_version(self) -> int:
        async with self._reading() as conn:
            if not await self._schema_table_exists(conn):
                return 0
            return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions"))

    async def require_schema(self) -> None:
        rules.check_schema_current(await self.schema_version(), self.schema_version_known, self.where)

    async def _check_schema_known(self) -> None:
        rules.check_schema_known(await self.schema_version(), self.schema_version_known, self.where)

    async def migrate(self, upto: int | None = None) -> list[int]:
        """Apply the migrations this database lacks, up to version `upto` (default: all),
        in one transaction; the versions applied."""
        async with self._transaction() as conn:
            await self._before_migrate(conn)
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (version integer PRIMARY KEY,"
                               " name text NOT NULL, applied_at double precision NOT NULL)")
            current = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions"))
            rules.check_schema_known(current, self.schema_version_known, self.where)
            pending = self.migrations[current:upto]
            # From nothing to the last, the schema whole: one script, a fraction of the
            # steps' DDL (PostgreSQL: 45 -> 32 ms, most of opening a fresh database).
            whole = current == 0 and pending and pending[-1].version == self.whole_schema.version
            for migration in [self.whole_schema] if whole else pending:
                await self._apply_migration(conn, migration)
            if pending:
                now = self.clock.now()
                await conn.executemany("INSERT INTO schema_versions VALUES ($1, $2, $3)",
                                       [(m.version, m.name, now) for m in pending])
            return [m.version for m in pending]

    # -- reading runs -------------------------------------------------------------------

    async def _fetch(self, sql: str, *args: Any) -> list[Sequence[Any]]:
        async with self._reading() as conn:
            return await conn.fetch(sql, *args)

    async def run_get(self, run_id: int) -> Run | None:
        rows = await self._fetch(q.GET_RUN, run_id)
        return run_from_row(rows[0]) if rows else None

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]:
        return [run_from_row(r) for r in await self._fetch(q.GET_MANY, self.dialect.array(run_ids))]

    async def run_list(self, params: RunListParams) -> list[Run]:
        where, args = self._where(rules.list_conditions(params))
        if params.thread is not None:
            args += [params.incarnation, params.tenant or "", params.thread]
            where += " AND " + q.THREAD_RUNS_FROM.format(held=len(args) - 2, tenant=len(args) - 1,
                                                         thread=len(args))
        async with self._reading() as conn:
            rows = await conn.fetch(f"SELECT {RUN_COLUMNS} FROM runs WHERE {where}"
                                    f" ORDER BY id DESC LIMIT ${len(args) + 1}", *args, params.limit)
            if params.thread is not None and params.incarnation is not None:
                # Checked after the list, as one read: the name still named that thread
                # once the list was read, so no later thread's run is in it.
                found = await self._thread_get(conn, params.tenant, params.thread)
                rules.check_thread_readable(params.thread, found, params.incarnation, missing_ok=False)
        return [run_from_row(row) for row in rows]

    def _where(self, conditions: list[tuple[str, str, object]]) -> tuple[str, list[Any]]:
        """A WHERE clause (shared text) and its arguments from (column, op, value)."""
        clauses, args = ["1 = 1"], []
        for column, op, value in conditions:
            if op == "in":
                args.append(self.dialect.array(value))  # type: ignore[arg-type]
                clauses.append(f"{column} IN_ARRAY(${len(args)})")
            else:
                args.append(value)
                clauses.append(f"{column} {op} ${len(args)}")
        return " AND ".join(clauses), args

    async def run_count_by_state(self, params: RunCountParams) -> dict[str, int]:
        where, args = self._where(_tenant_only(params.tenant))
        rows = await self._fetch(f"SELECT state, count(*) FROM runs WHERE {where} GROUP BY state", *args)
        return {state: count for state, count in rows}

    async def run_queue_stats(self, params: RunQueueStatsParams) -> list[QueueStat]:
        where, args = self._where(_tenant_only(params.tenant))
        now = len(args) + 1
        rows = await self._fetch(
            f"SELECT queue, state, count(*), min(CASE WHEN state = 'queued' AND run_at <= ${now}"
            f" THEN run_at END) FROM runs WHERE {where} GROUP BY queue, state",
            *args, self.clock.now(params.now))
        return [(row[0], row[1], row[2], row[3]) for row in rows]

    async def run_ended_times(self, params: RunEndedParams) -> list[EndedTimes]:
        # A range of the runs_finished index, read backwards: as many rows as the limit,
        # however many runs the table keeps.
        where, args = self._where([("finished_at", ">=", params.since), *_tenant_only(params.tenant)])
        rows = await self._fetch(f"SELECT run_at, started_at, finished_at FROM runs WHERE {where}"
                                 f" ORDER BY finished_at DESC LIMIT {int(params.limit)}", *args)
        return [(row[0], row[1], row[2]) for row in rows]

    async def run_next_due_at(self, params: RunNextDueParams) -> float | None:
        async with self._reading() as conn:
            keys = ["*"] if params.majors is None else rules.claim_keys(params.majors)
            value = await conn.fetchval(q.NEXT_DUE, self.dialect.array(params.queues),
                                        self.dialect.array(params.tasks), self.dialect.array(keys),
                                        params.fleet)
        return None if value is None else float(value)

    async def run_count_due_by_task(self, params: RunCountDueParams) -> dict[str, int]:
        rows = await self._fetch(q.COUNT_DUE_BY_TASK, self.dialect.array(params.queues),
                                 params.due_before)
        return {task: count for task, count in rows}

    # -- the journal and the log --------------------------------------------------------

    async def step_list(self, run_id: int) -> list[StepRecord]:
        return [StepRecord(*row) for row in await self._fetch(q.LIST_STEPS, run_id)]

    async def step_list_resumable(self, run_id: int) -> list[StepRecord]:
        return [StepRecord(*row) for row in await self._fetch(q.LIST_STEPS_RESUMABLE, run_id)]

    async def event_list(self, params: EventListParams) -> list[Event]:
        rows = await self._fetch(q.LIST_EVENTS, params.run_id, params.after, params.limit)
        return [Event(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    async def _log(self, conn: SqlConnection, run_id: int, kind: str, data: dict[str, Any],
                   now: float) -> None:
        """Append one event to a run's log, under the run's row lock (unfenced: for the
        changes the store itself makes, such as a cancel or a retry)."""
        seq = await conn.fetchval(q.BUMP_SEQ, run_id)
        await conn.execute(q.APPEND_EVENT, run_id, seq, kind, json.dumps(data), now)
        await conn.notify("events", [run_id])

    async def _log_bumped(self, conn: SqlConnection, runs: Sequence[Run],
                          kinds: Sequence[tuple[str, dict[str, Any]]], now: float) -> None:
        """Log one event per run whose last_seq the caller's UPDATE already bumped."""
        await conn.executemany(q.APPEND_EVENT, [(run.id, run.last_seq, kind, json.dumps(data), now)
                                                for run, (kind, data) in zip(runs, kinds)])
        await conn.notify("events", [run.id for run in runs])

    async def _wake_parents(self, conn: SqlConnection, runs: Sequence[Run], now: float) -> None:
        parents = [run.parent_id for run in runs if run.parent_id is not None]
        if parents:
            await conn.execute(q.WAKE_PARENTS, self.dialect.array(parents), now)
            await conn.notify("queued")

    async def _locked_run(self, conn: SqlConnection, run_id: int) -> Run:
        row = await conn.fetchrow(q.LOCK_RUN, run_id)
        if row is None:
            raise RunNotFound(f"run {run_id} not found")
        return run_from_row(row)

    # -- cancel, retry ------------------------------------------------------------------

    def _rolled_back(self, exc: StoreError) -> bool:
        """Whether `exc` is a conflict the database rolled back whole (a deadlock, a
        serialization failure), which the same operation may simply try again."""
        return False

    async def run_cancel(self, params: RunCancelParams) -> Run:
        for attempt in range(CONFLICT_RETRIES):
            try:
                return await self._cancel(params)
            except StoreError as exc:
                if not self._rolled_back(exc) or attempt == CONFLICT_RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _cancel(self, params: RunCancelParams) -> Run:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            # Locks in one order, from the oldest: the run's parent (which the end of the
            # run, if queued, wakes), the run, its descendants by id. Two cancels of one
            # family then wait for each other, never both.
            found = await conn.fetchrow(q.GET_RUN, params.run_id)
            parent_id = None if found is None else run_from_row(found).parent_id
            if parent_id is not None:
                await conn.fetchrow(q.LOCK_RUN, parent_id)
            run = await self._locked_run(conn, params.run_id)
            descendants = await self._locked_family(conn, run.id)
            plan = rules.plan_cancel(run, descendants)
            for run_id in plan.ask_to_stop:
                await conn.execute(q.REQUEST_CANCEL, run_id)
                await self._log(conn, run_id, "cancel_requested", {}, now)
                await conn.notify("cancel", [run_id])
            for member in plan.end_now:
                await self._end_queued(conn, member.id, RunState.CANCELLED, now, "cancelled",
                                       {"reason": "cancelled on request"}, error=rules.cancelled_error())
            await self._wake_parents(conn, plan.end_now, now)
            run = await self._locked_run(conn, run.id)
        self.hub.fire_all()  # cancel, done and events topics of a whole family
        return run

    async def _locked_family(self, conn: SqlConnection, run_id: int) -> list[Run]:
        """A run's descendants, each locked, in id order; read until a read finds no new
        member. A child inserted as the family is read holds its parent (PostgreSQL: FOR
        KEY SHARE) until it commits, so the lock of that parent waits for it, and the
        next read finds it; once every member is locked, a child inserted after sees its
        parent's cancel and is born cancelled (rules.born_cancelled)."""
        locked: dict[int, Run] = {}
        while True:
            family = [row[0] for row in await conn.fetch(q.FAMILY, run_id)]
            new = [member for member in family if member not in locked]
            if not new:
                return sorted(locked.values(), key=lambda run: run.id)
            for row in await conn.fetch(q.LOCK_RUNS, self.dialect.array(new)):
                member = run_from_row(row)
                locked[member.id] = member

    async def _end_queued(self, conn: SqlConnection, run_id: int, state: RunState, now: float,
                          kind: str, data: dict[str, Any], *, error: str | None = None,
                          interrupt: str | None = None) -> None:
        await conn.execute(q.END_QUEUED, run_id, state.value, now, error, interrupt)
        await self._log(conn, run_id, kind, data, now)
        await conn.notify("done", [run_id])

    async def run_retry(self, params: RunRetryParams) -> Run:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            found = await self._retry_thread(conn, params.run_id)
            run = await self._locked_run(conn, params.run_id)
            journal = [StepRecord(*row) for row in await conn.fetch(q.LIST_STEPS, run.id)]
            forget = rules.retry_drops(run, journal)
            # A run is its thread's when it is not older than the thread's first run.
            rules.check_retry_on_thread(run, found, found is not None and run.id >= found.incarnation)
            if not await conn.execute(q.RETRY_RESET, run.id, now, run.fence):
                raise StoreError(f"run {run.id}: its state changed during the retry; try again")
            if forget:
                await conn.execute(q.DROP_STEPS, run.id, self.dialect.array(forget))
            await self._log(conn, run.id, "retried", rules.retried_event(run, params.by), now)
            await conn.notify("queued")
            run = await self._locked_run(conn, run.id)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(run.id))
        return run

    async def _retry_thread(self, conn: SqlConnection, run_id: int) -> ThreadInfo | None:
        """The thread that bears the name of the run's thread now, locked before the run
        is (a run's thread and tenant never change, so the unlocked read names it)."""
        row = await conn.fetchrow(q.GET_RUN, run_id)
        run = None if row is None else run_from_row(row)
        if run is None or run.thread is None:
            return None
        found = await conn.fetchrow(q.THREAD_GET_LOCKED, run.tenant or "", run.thread)
        return None if found is None else _thread_info(found)

    # -- rescue and deadlines -----------------------------------------------------------

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]:
        now, judged = self.clock.now(params.now), self.clock.judged(params.now)
        # A look without the write lock first: most ticks of most workers find nothing.
        async with self._reading() as conn:
            if not await self._dead_worker_ids(conn, params, now) and not await conn.fetch(q.STUCK, judged):
                return []
        async with self._transaction() as conn:
            dead = await self._dead_worker_ids(conn, params, now)
            if dead:
                await self._unregister_dead(conn, dead)
            stuck = [run_from_row(row) for row in await conn.fetch(q.STUCK, judged)]
            rescued = await self._apply_rescues(conn, [
                rules.rescue_fate(run, params.max_recoveries, now) for run in stuck], now)
        self.hub.fire_changed(rescued)
        return rescued

    async def _unregister_dead(self, conn: SqlConnection, dead: list[int]) -> None:
        """Delete the rows of the workers found dead; their runs are then ownerless (see
        STUCK). A dialect whose death is read outside the transaction's view (PostgreSQL's
        session locks) re-checks it in the deleting statement; SQLite's write transaction
        already holds what `_dead_worker_ids` read (a heartbeat is a write)."""
        await conn.execute(q.WORKER_DELETE_MANY, self.dialect.array(dead))

    async def _apply_rescues(self, conn: SqlConnection, fates: Sequence[rules.Rescue],
                             now: float) -> list[Run]:
        rescued, kinds = [], []
        for fate in fates:
            row = await conn.fetchrow(q.RESCUE_ONE, fate.run_id, fate.fence, fate.state.value,
                                      fate.recoveries, fate.run_at, fate.finished_at, fate.error)
            if row is not None:
                rescued.append(run_from_row(row))
                kinds.append((fate.event_kind, {"recoveries": fate.recoveries}))
        if rescued:
            await self._log_bumped(conn, rescued, kinds, now)
            ended = [run for run in rescued if run.done]
            await conn.notify("done", [run.id for run in ended])
            await self._wake_parents(conn, ended, now)
            await conn.notify("queued")
        return rescued

    async def run_expire_many(self, params: RunExpireParams) -> list[Run]:
        """Every worker sweeps: a deadline holds even when the run's own worker is dead."""
        now, judged = self.clock.now(params.now), self.clock.judged(params.now)
        async with self._reading() as conn:
            if await conn.fetchval(q.DEADLINE_PASSED, judged) is None:
                return []
        async with self._transaction() as conn:
            expired = [run_from_row(r) for r in await conn.fetch(q.EXPIRE, judged, rules.deadline_error())]
            await self._closed_failed(conn, expired, "DeadlineExceeded", now)
        self.hub.fire_changed(expired)
        return expired

    # -- unrunnable runs ----------------------------------------------------------------

    async def run_count_unrunnable(self, params: RunUnrunnableParams) -> list[UnrunnableKind]:
        async with self._reading() as conn:
            return await self._unrunnable(conn, params)

    async def run_age_unrunnable(self, params: RunUnrunnableParams) -> float | None:
        params = RunUnrunnableParams(params.due_for_s, params.now)  # every tenant's
        async with self._reading() as conn:
            return max((age_s for _, age_s in await self._unrunnable_aged(conn, params)), default=None)

    async def run_fail_unrunnable_many(self, params: RunUnrunnableParams) -> list[Run]:
        """Every worker sweeps: runs that no live worker can run (as the workers table
        says now) and that were due for `params.due_for_s` end `failed`."""
        now = self.clock.now(params.now)
        params = RunUnrunnableParams(params.due_for_s, params.now)  # every tenant's
        if not await self.run_count_unrunnable(params):  # most checks find nothing: no write lock
            return []
        closed: list[Run] = []
        async with self._transaction() as conn:
            # Decided and applied on one view of the workers: a worker that registers for
            # these runs meanwhile either commits first (seen here, its runs kept) or
            # waits for this commit (its runs were unrunnable when they were closed).
            await self._hold_registrations(conn)
            for queue, task, major, _count in await self._unrunnable(conn, params):
                error = rules.unrunnable_error(task, major, params.due_for_s)
                closed += [run_from_row(row) for row in await conn.fetch(
                    q.FAIL_UNRUNNABLE, self.clock.judged(params.now), float(params.due_for_s), queue,
                    task, -1 if major is None else major, error)]
            await self._closed_failed(conn, closed, "Unrunnable", now)
        self.hub.fire_changed(closed)
        return closed

    async def _hold_registrations(self, conn: SqlConnection) -> None:
        """Hold registrations off until the transaction ends (the dialect's own; SQLite's
        write transaction already holds the whole database, and a registration is a write)."""
        return None

    async def _closed_failed(self, conn: SqlConnection, runs: list[Run], error: str, now: float) -> None:
        """Runs a sweep just closed `failed` (a deadline, unrunnable): each one's `failed`
        event, the notification that they ended, and their parked parents woken."""
        if runs:
            await self._log_bumped(conn, runs, [("failed", {"error": error})] * len(runs), now)
            await conn.notify("done", [run.id for run in runs])
            await self._wake_parents(conn, runs, now)

    async def _unrunnable(self, conn: SqlConnection, params: RunUnrunnableParams) -> list[UnrunnableKind]:
        return [kind for kind, _ in await self._unrunnable_aged(conn, params)]

    async def _unrunnable_aged(self, conn: SqlConnection,
                               params: RunUnrunnableParams) -> list[tuple[UnrunnableKind, float]]:
        """The unrunnable kinds, each with how long its longest-due run has been due."""
        judged, due_for_s = self.clock.judged(params.now), float(params.due_for_s)
        rows = await (conn.fetch(q.DUE_KINDS, judged, due_for_s) if params.tenant is None else
                      conn.fetch(q.DUE_KINDS_OF_TENANT, judged, due_for_s, params.tenant))
        if not rows:
            return []
        workers = [worker_from_row(row) for row in await conn.fetch(q.WORKER_LIST)]
        kinds = [(row[0], row[1], None if row[2] is None else int(row[2]), int(row[3])) for row in rows]
        unrunnable = rules.unrunnable_kinds(kinds, workers)
        return [(kind, float(row[4])) for kind, row in zip(kinds, rows) if kind in unrunnable]

    # -- threads ------------------------------------------------------------------------

    async def run_insert_threaded(self, params: RunInsertParams) -> Run:
        assert params.thread is not None, "a threaded submission names its thread"
        now = self.clock.now(params.now)
        tenant = params.tenant or ""
        async with self._transaction() as conn:
            made = await conn.execute(q.THREAD_ENSURE, tenant, params.thread, now) == 1
            if await conn.fetchval(q.THREAD_LOCK, tenant, params.thread) is not None:
                raise ThreadDeleted(f"thread {params.thread!r} was deleted")
            existing = await conn.fetchrow(self.get_by_key, tenant, params.key)
            if existing is not None:
                if made:
                    await conn.execute(q.THREAD_DROP_UNBORN, tenant, params.thread)
                run = run_from_row(existing)
                run.existed = True
                return run
            rows = await conn.fetch(q.THREAD_OPEN_RUNS, tenant, params.thread)
            open_runs = [run_from_row(r) for r in rows]
            turns = {int(row[0]): float(row[30]) for row in rows if row[30] is not None}
            asking = {row[0] for row in await conn.fetch(
                q.QUESTIONS_ASKING, self.dialect.array([r.id for r in open_runs]))} if open_runs else set()
            plan = rules.plan_busy(params.thread, open_runs, params.on_busy, asking, turns)
            await self._stop_for_thread(conn, plan, now)
            (run,) = await self._insert_runs(conn, [params], now)
            if plan.turn is not None:  # ahead of the runs waiting on the thread
                await conn.execute(q.RUN_SET_TURN, run.id, plan.turn)
            await conn.execute(q.THREAD_BEGIN, tenant, params.thread, run.id)
        self.hub.fire_all()  # queued, and the cancel watchers of interrupted runs
        return run

    async def _stop_for_thread(self, conn: SqlConnection, plan: rules.BusyPlan, now: float) -> None:
        """Running runs stop at their next step boundary; begun ones between attempts end
        now (the runs waiting their turn are not in the plan: they stay, in order)."""
        for run_id in plan.ask_to_stop:
            await conn.execute(q.REQUEST_INTERRUPT, run_id, plan.mode)
            await self._log(conn, run_id, "interrupt_requested", {"mode": plan.mode}, now)
            await conn.notify("cancel", [run_id])
        if plan.drops_history and plan.end_now:
            await conn.execute(q.THREAD_FORGET_RUN, self.dialect.array(plan.end_now))
        for run_id in plan.end_now:
            await self._end_queued(conn, run_id, RunState.INTERRUPTED, now, "interrupted",
                                   {"mode": plan.mode}, interrupt=plan.mode)

    async def thread_get(self, params: ThreadGetParams) -> ThreadInfo | None:
        async with self._reading() as conn:
            return await self._thread_get(conn, params.tenant, params.thread)

    async def _thread_get(self, conn: SqlConnection, tenant: str | None, thread: str) -> ThreadInfo | None:
        row = await conn.fetchrow(q.THREAD_GET, tenant or "", thread)
        return None if row is None else _thread_info(row)

    async def thread_messages(self, params: ThreadMessagesParams) -> list[tuple[int, int, str]]:
        tenant = params.tenant or ""
        async with self._reading() as conn:
            found = await self._thread_get(conn, tenant, params.thread)
            rules.check_thread_readable(params.thread, found, params.incarnation, missing_ok=True)
            before = params.before_run if params.before_run is not None else NO_RUN_BEFORE
            rows = await conn.fetch(q.THREAD_MESSAGES, tenant, params.thread, before)
        return [(row[0], row[1], row[2]) for row in rows]

    async def thread_append(self, params: ThreadAppendParams) -> bool:
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return False
            await conn.execute(q.THREAD_APPEND, params.run_id, params.idx, params.message,
                               self.clock.now(params.now))
        return True

    async def thread_forget_run(self, params: ThreadForgetParams) -> bool:
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return False
            await conn.execute(q.THREAD_FORGET_RUN, self.dialect.array([params.run_id]))
        return True

    async def thread_delete(self, params: ThreadDeleteParams) -> bool:
        tenant = params.tenant or ""
        async with self._transaction() as conn:
            found = await conn.execute(q.THREAD_DELETE, tenant, params.thread, self.clock.now(params.now))
            if params.purge:
                await conn.execute(q.THREAD_PURGE, tenant, params.thread)
                await conn.execute(q.THREAD_EVENTS_PURGE, tenant, params.thread)
        return found == 1

    async def thread_list(self, params: ThreadListParams) -> list[ThreadInfo]:
        clauses, args = ["1 = 1"], list[Any]()
        if params.tenant is not None:
            args.append(params.tenant)
            clauses.append(f"tenant = ${len(args)}")
        if not params.include_deleted:
            clauses.append("deleted_at IS NULL")
        if params.after is not None:
            args += [params.after.created_at, params.after.tenant or "", params.after.thread]
            clauses.append(q.THREAD_AFTER.format(*range(len(args) - 2, len(args) + 1)))
        args.append(params.limit)
        rows = await self._fetch(q.THREAD_LIST.format(where=" AND ".join(clauses), limit=f"${len(args)}"),
                                 *args)
        return [ThreadInfo(thread=row[1], tenant=row[0] or None, incarnation=int(row[8]),
                           created_at=row[2], deleted_at=row[3],
                           runs=int(row[4]), open_runs=int(row[5]), last_run_id=row[6],
                           last_run_state=None if row[7] is None else RunState(row[7]))
                for row in rows]

    async def thread_event_list(self, params: ThreadEventListParams) -> list[ThreadEvent]:
        # Numbered on read (see migration 0011): a read that finds the thread's logs grown
        # numbers the new events first, under the thread's row lock (SQLite: its write
        # lock), so two readers never give a number twice; a read with nothing new writes
        # nothing and takes no lock.
        tenant = params.tenant or ""
        async with self._reading() as conn:
            found = await self._thread_get(conn, tenant, params.thread)
            rules.check_thread_readable(params.thread, found, params.incarnation, missing_ok=False)
            behind = await conn.fetch(q.THREAD_EVENTS_BEHIND, tenant, params.thread)
        if behind:
            async with self._transaction() as conn:
                await self._number_thread_events(conn, tenant, params.thread)
        async with self._reading() as conn:
            rows = await conn.fetch(q.THREAD_EVENT_PAGE, tenant, params.thread, params.after, params.limit)
            if params.incarnation is not None:
                # The page and this check are one read: a page read as the name passed to
                # a new thread is not shown to a reader of the old one.
                found = await self._thread_get(conn, tenant, params.thread)
                rules.check_thread_readable(params.thread, found, params.incarnation, missing_ok=False)
        return [ThreadEvent(row[1], row[2], row[3], json.loads(row[4]), row[5], tseq=row[0]) for row in rows]

    async def _number_thread_events(self, conn: SqlConnection, tenant: str, thread: str) -> None:
        if await conn.fetchrow(q.THREAD_LOCK, tenant, thread) is None:
            return
        top = int(await conn.fetchval(q.THREAD_EVENTS_TOP, tenant, thread))
        for run_id, numbered, last_seq in await conn.fetch(q.THREAD_EVENTS_BEHIND, tenant, thread):
            await conn.execute(q.THREAD_NUMBER_EVENTS, tenant, thread, top - numbered, run_id,
                               numbered, last_seq)
            top += last_seq - numbered

    # -- questions ----------------------------------------------------------------------

    async def question_open(self, params: QuestionOpenParams) -> Question | None:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return None
            row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
            if row is None:
                await conn.execute(q.QUESTION_INSERT, params.run_id, params.position, params.kind,
                                   params.body, now)
                await self._log(conn, params.run_id, "asked", rules.asked_event(params), now)
                row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
        self.hub.fire(events_topic(params.run_id))
        assert row is not None
        return Question.of_row(*row)

    async def question_answer(self, params: QuestionAnswerParams) -> Question:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            found = await conn.fetchrow(q.LOCK_RUN, params.run_id)
            row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
            question = None if row is None else Question.of_row(*row)
            run = None if found is None else run_from_row(found)
            if rules.plan_answer(run, question, params):
                await conn.execute(q.QUESTION_ANSWER, params.run_id, params.position, params.answer,
                                   params.by, now)
                await self._log(conn, params.run_id, "answered", rules.answered_event(params), now)
                # A parked run comes due now; one still running (its park on its way) wakes
                # as its park lands, as a parent does when its child ends.
                await conn.execute(q.WAKE_PARENTS, self.dialect.array([params.run_id]), now)
                await conn.notify("queued")
                row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(params.run_id))
        assert row is not None
        return Question.of_row(*row)

    async def question_list(self, params: QuestionListParams) -> list[Question]:
        clauses, args = ["1 = 1"], list[Any]()
        if params.run_id is not None:
            args.append(params.run_id)
            clauses.append(f"q.run_id = ${len(args)}")
        if params.pending:
            clauses.append("q.answered_at IS NULL AND r.state IN ('queued', 'running')")
        if params.tenant is not None:
            args.append(params.tenant)
            clauses.append(f"r.tenant = ${len(args)}")
        args.append(params.limit)
        rows = await self._fetch(
            f"SELECT {q.QUESTION_COLUMNS} FROM questions q JOIN runs r ON r.id = q.run_id"
            f" WHERE {' AND '.join(clauses)} ORDER BY q.asked_at, q.run_id, q.position"
            f" LIMIT ${len(args)}", *args)
        return [Question.of_row(*row) for row in rows]

    # -- retention ----------------------------------------------------------------------

    async def lease_take(self, params: LeaseTakeParams) -> bool:
        return await self._change(q.LEASE_TAKE, params.name, params.holder,
                                  self.clock.judged(params.now), params.lease_s) == 1

    def _judged_here(self, given: float | None) -> float | None:
        """The time a retention statement judges ages by: None for "the database's clock,
        read in the statement" (see runwright.clock), else the injected one."""
        return self.clock.judged(given)

    async def run_reclaim(self, params: RunReclaimParams) -> RunReclaimed:
        age_s = None if params.max_age_s is None else float(params.max_age_s)
        ended_before = None if params.ended_before is None else float(params.ended_before)
        judged = self._judged_here(params.now)
        async with self._reading() if params.dry_run else self._transaction() as conn:
            if params.run_ids is None:
                rows = await conn.fetch(q.RECLAIMABLE, ended_before, params.limit, judged, age_s)
            else:
                rows = await conn.fetch(q.RECLAIMABLE_OF, ended_before, params.limit, judged, age_s,
                                        self.dialect.array(list(params.run_ids)))
            ids = [row[0] for row in rows]
            return await self._reclaim(conn, ids, params.dry_run, q.RECLAIM_OLD, ended_before, judged, age_s)

    async def thread_run_reclaim(self, params: ThreadRunReclaimParams) -> RunReclaimed:
        async with self._reading() if params.dry_run else self._transaction() as conn:
            ids = [row[0] for row in await conn.fetch(q.THREAD_RUNS_BEYOND, params.keep, params.limit)]
            if ids and not params.dry_run:
                ids = [row[0] for row in await conn.fetch(q.RECLAIM_LOCK, self.dialect.array(ids))]
            return await self._reclaim(conn, ids, params.dry_run, q.RECLAIM_CAPPED, params.keep,
                                       max(params.keep - 1, 0))

    async def _reclaim(self, conn: SqlConnection, ids: list[int], dry_run: bool, remove: str,
                       *judged_by: Any) -> RunReclaimed:
        """Remove these ended runs with their journal, log, questions and their events'
        numbers in a thread's log; widen the reclaimed ranges by them. `remove` (with the
        ids, then `judged_by`) deletes the runs that still qualify, judged again in that
        statement: only what it returns goes (see RECLAIM_OLD)."""
        if not ids:
            return RunReclaimed()
        if not dry_run:
            gone = await conn.fetch(remove, self.dialect.array(ids), *judged_by)
            ids = sorted(row[0] for row in gone)
            if not ids:
                return RunReclaimed()
        array = self.dialect.array(ids)
        steps = int(await conn.fetchval("SELECT count(*) FROM steps WHERE run_id IN_ARRAY($1)", array))
        events = int(await conn.fetchval("SELECT count(*) FROM events WHERE run_id IN_ARRAY($1)", array))
        if not dry_run:
            for table in ("steps", "events", "questions", "thread_events"):
                await conn.execute(f"DELETE FROM {table} WHERE run_id IN_ARRAY($1)", array)
            if self.forget_keys is not None:
                await conn.execute(self.forget_keys, self.dialect.array([row[1] for row in gone]),
                                   self.dialect.array([row[2] for row in gone]))
            await self._widen_reclaimed(conn, ids)
        return RunReclaimed(ids, steps, events)

    async def _widen_reclaimed(self, conn: SqlConnection, ids: list[int]) -> None:
        """Rewrite the reclaimed ranges with `ids` added (rules.merge_ranges), one rewrite
        at a time (see _lock_reclaimed): two passes that both read the ranges and both
        rewrote them would lose one's ids, or collide on a range's first id."""
        await self._lock_reclaimed(conn)
        ranges = [(row[0], row[1]) for row in await conn.fetch("SELECT lo, hi FROM reclaimed")]
        await conn.execute("DELETE FROM reclaimed")
        await conn.executemany("INSERT INTO reclaimed (lo, hi) VALUES ($1, $2)",
                               rules.merge_ranges(ranges, ids))

    async def _lock_reclaimed(self, conn: SqlConnection) -> None:
        """Hold the reclaimed ranges until the transaction ends, against another rewrite
        (the dialect's own; SQLite's write transaction already holds the whole database)."""
        return None

    async def event_trim(self, params: EventTrimParams) -> EventsTrimmed:
        # One transaction a batch (a commit a run was 70 s a pass on a loaded PostgreSQL).
        # The runs are locked as they are chosen, skipping those another transaction
        # holds (a completer, an append: trimmed next pass), so the trim waits on no run's
        # lock and cannot be one end of a deadlock.
        found = EventsTrimmed()
        async with self._reading() if params.dry_run else self._transaction() as conn:
            for run_id, last_seq, trimmed_seq in await conn.fetch(q.TRIMMABLE, params.keep, params.limit):
                cut = rules.trim_marker(last_seq, trimmed_seq, params.keep)
                if cut is not None and (params.dry_run or await self._trim(conn, run_id, *cut, params.now)):
                    found.run_ids.append(run_id)
                    found.events += cut[0] - trimmed_seq
        return found

    async def _trim(self, conn: SqlConnection, run_id: int, marker: int, data: dict[str, int],
                    now: float | None) -> bool:
        if not await conn.execute(q.TRIM_MARK, run_id, marker):
            return False  # trimmed as far already
        await conn.execute(q.TRIM_EVENTS, run_id, marker)
        await conn.execute(q.TRIM_THREAD_EVENTS, run_id, marker)
        await conn.execute(q.TRIM_MARKER, run_id, marker, rules.TRIMMED, json.dumps(data),
                           self.clock.now(now))
        return True

    async def run_was_reclaimed(self, run_id: int) -> bool:
        return bool(await self._fetch(q.RECLAIMED_HAS, run_id))

    async def thread_tombstone_reclaim(self, params: ThreadTombstoneReclaimParams) -> TombstonesReclaimed:
        judged, age_s = self._judged_here(params.now), float(params.max_age_s)
        async with self._reading() if params.dry_run else self._transaction() as conn:
            rows = await conn.fetch(q.TOMBSTONES, judged, age_s, params.limit)
            if not params.dry_run:
                rows = [row for row in rows
                        if await self._drop_tombstone(conn, row[0], row[1], judged, age_s)]
        return TombstonesReclaimed([(row[0] or None, row[1]) for row in rows])

    async def _drop_tombstone(self, conn: SqlConnection, tenant: str, thread: str,
                              judged: float | None, age_s: float) -> bool:
        """Remove the tombstone if it still qualifies (TOMBSTONE_DROP judges again), then
        the thread's history and log."""
        if not await conn.execute(q.TOMBSTONE_DROP, tenant, thread, judged, age_s):
            return False
        await conn.execute(q.TOMBSTONE_MESSAGES_DROP, tenant, thread)
        await conn.execute(q.TOMBSTONE_EVENTS_DROP, tenant, thread)
        return True

    async def thread_message_trim(self, params: ThreadMessageTrimParams) -> ThreadMessagesTrimmed:
        async with self._reading() if params.dry_run else self._transaction() as conn:
            rows = [tuple(row) for row in await conn.fetch(q.MESSAGES_BEYOND, params.keep, params.limit)]
            if rows and not params.dry_run:
                rows = await self._messages_of_held_runs(conn, rows)
                await conn.executemany(q.MESSAGE_DROP, rows)
        threads = list(dict.fromkeys((row[0] or None, row[1]) for row in rows))
        return ThreadMessagesTrimmed(threads, len(rows))

    async def _messages_of_held_runs(self, conn: SqlConnection, rows: list[tuple[Any, ...]],
                                     ) -> list[tuple[Any, ...]]:
        """Of the chosen messages, those whose run is gone or is ended and held by this
        transaction now: a retry cannot make it open until the trim is over (MESSAGE_DROP
        judges again that it is not open)."""
        run_ids = self.dialect.array(sorted({row[2] for row in rows}))
        present = {row[0] for row in await conn.fetch(q.MESSAGE_RUNS, run_ids)}
        held = {row[0] for row in await conn.fetch(q.MESSAGE_RUNS_LOCK, run_ids)}
        return [row for row in rows if row[2] not in present or row[2] in held]

    # -- rate limits --------------------------------------------------------------------

    async def bucket_take(self, params: BucketTakeParams) -> float:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            await conn.execute(q.BUCKET_ENSURE, params.name, params.capacity, now)
            row = await conn.fetchrow(q.BUCKET_LOCK, params.name)
            assert row is not None, "the bucket was just made"
            take = rules.take_from_bucket(params, float(row[0]), float(row[1]), now)
            if take.granted:
                await conn.execute(q.BUCKET_SET, params.name, take.tokens, take.at)
        return take.wait_s

    # -- schedules ----------------------------------------------------------------------

    async def schedule_save(self, schedule: Schedule) -> Schedule:
        async with self._transaction() as conn:
            row = await conn.fetchrow(q.SCHEDULE_SAVE, schedule.name, *schedule.definition(),
                                      schedule.paused, schedule.next_fire_at, schedule.created_at,
                                      schedule.updated_at)
        assert row is not None
        return schedule_from_row(row)

    async def schedule_list(self) -> list[Schedule]:
        return [schedule_from_row(row) for row in await self._fetch(q.SCHEDULE_LIST)]

    async def schedule_due(self, params: ScheduleDueParams) -> list[Schedule]:
        rows = await self._fetch(q.SCHEDULE_DUE, self.clock.now(params.now))
        return [schedule_from_row(row) for row in rows]

    async def _change(self, sql: str, *args: Any) -> int:
        async with self._transaction() as conn:
            return await conn.execute(sql, *args)

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> bool:
        return await self._change(q.SCHEDULE_ADVANCE, params.name, params.expected_next,
                                  params.next_fire_at) == 1

    async def schedule_set_paused(self, params: SchedulePauseParams) -> bool:
        return await self._change(q.SCHEDULE_PAUSE, params.name, params.paused, params.next_fire_at,
                                  self.clock.now(params.now)) == 1

    async def schedule_delete(self, name: str) -> bool:
        return await self._change(q.SCHEDULE_DELETE, name) == 1

    # -- paused queues --------------------------------------------------------------------

    async def queue_set_paused(self, params: QueuePauseParams) -> bool:
        if params.paused:
            return await self._change(q.QUEUE_PAUSE, params.fleet, params.queue,
                                      self.clock.judged(params.now)) == 1
        return await self._change(q.QUEUE_RESUME, params.fleet, params.queue) == 1

    async def queue_list_paused(self, fleet: str) -> set[str]:
        return {str(row[0]) for row in await self._fetch(q.QUEUES_PAUSED, fleet)}

    # -- workers ------------------------------------------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            return int(await conn.fetchval(q.WORKER_INSERT, *worker_row(params, now)))

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        return await self._change(q.WORKER_HEARTBEAT, params.worker_id,
                                  self.clock.now(params.now)) == 1

    async def worker_deregister(self, worker_id: int) -> None:
        await self._change(q.WORKER_DELETE, worker_id)

    async def worker_list(self) -> list[WorkerInfo]:
        return [worker_from_row(row) for row in await self._fetch(q.WORKER_LIST)]

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """Nothing wakes a rescuer here (PostgreSQL's store does): it sleeps."""
        await asyncio.sleep(params.timeout_s)
        return False


def _tenant_only(tenant: str | None) -> list[tuple[str, str, object]]:
    return [] if tenant is None else [("tenant", "=", tenant)]


def _thread_info(row: Sequence[Any]) -> ThreadInfo:
    """A thread from a row of THREAD_GET's columns."""
    deleted_at = None if row[4] is None else float(row[4])
    return ThreadInfo(row[0], row[1] or None, int(row[2]), float(row[3]), deleted_at)
