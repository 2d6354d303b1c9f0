"""The SQL store's runs: reading them, cancel and retry, rescue and deadlines, unrunnable runs."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from ...core._journal import StepRecord
from ...errors import StoreError
from ...runs import Run, RunState
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import (
    EndedTimes,
    QueueStat,
    RunCancelParams,
    RunCountDueParams,
    RunCountParams,
    RunEndedParams,
    RunExpireParams,
    RunLimitedTasksParams,
    RunListParams,
    RunNextDueParams,
    RunPauseParams,
    RunQueueStatsParams,
    RunRescueParams,
    RunResumeParams,
    RunRetryParams,
    RunUnrunnableParams,
    ThreadInfo,
    UnrunnableKind,
)
from . import _statements as q
from ._base import SqlBase, _thread_info
from ._columns import RUN_COLUMNS, run_from_row, worker_from_row
from ._dialect import SqlConnection

__all__ = ["SqlRuns"]

# Tries of an operation whose transaction the database rolled back for a conflict (a
# deadlock between overlapping cancels of one family, say) before its error is raised.
CONFLICT_RETRIES = 5


class SqlRuns(SqlBase):
    """Reading runs, and moving them on outside the hot path (`RunStore`)."""

    # -- reading runs -------------------------------------------------------------------

    async def run_get(self, run_id: int) -> Run | None:
        rows = await self._fetch(q.GET_RUN, run_id)
        return run_from_row(rows[0]) if rows else None

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]:
        return [run_from_row(r) for r in await self._fetch(q.GET_MANY, self.dialect.array(run_ids))]

    async def run_list(self, params: RunListParams) -> list[Run]:
        where, args = self._where(rules.list_conditions(params, self.clock.now(params.now)))
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
            elif op == "null":
                clauses.append(f"{column} IS NULL")
            elif op == "contains":  # a search: the value's wildcards match only themselves
                args.append(rules.like_contains(str(value)))
                clauses.append(f"lower({column}) LIKE ${len(args)} ESCAPE '\\'")
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
            args = [self.dialect.array(params.queues), self.dialect.array(params.tasks),
                    self.dialect.array(keys), params.fleet]
            if params.runs == "rate_end":
                value = await conn.fetchval(q.RATE_NEXT_END, self.clock.judged(params.now))
            elif params.runs == "limited_later":
                value = await conn.fetchval(q.NEXT_DUE_LIMITED, *args, self.clock.judged(params.now))
            else:
                statement = q.NEXT_DUE_UNLIMITED if params.runs == "unlimited" else q.NEXT_DUE
                value = await conn.fetchval(statement, *args)
        return None if value is None else float(value)

    async def run_limited_tasks(self, params: RunLimitedTasksParams) -> set[str]:
        rows = await self._fetch(q.LIMITED_TASKS, self.dialect.array(params.queues),
                                 self.dialect.array(params.tasks))
        return {row[0] for row in rows}

    async def run_count_due_by_task(self, params: RunCountDueParams) -> dict[str, int]:
        rows = await self._fetch(q.COUNT_DUE_BY_TASK, self.dialect.array(params.queues),
                                 params.due_before)
        return {task: count for task, count in rows}

    # -- cancel, retry ------------------------------------------------------------------

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
                                       {"reason": params.reason}, error=rules.cancelled_error(params.reason))
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

    # -- pause, resume --------------------------------------------------------------

    async def run_pause(self, params: RunPauseParams) -> Run:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            run = await self._locked_run(conn, params.run_id)
            action = rules.plan_pause(run)
            if action == rules.PauseAction.HOLD:
                await conn.execute(q.PAUSE_HOLD, run.id)
                await self._log(conn, run.id, "paused", {"by": params.by, "waited": run.waiting}, now)
            elif action == rules.PauseAction.REQUEST:
                await conn.execute(q.PAUSE_REQUEST, run.id)
                await self._log(conn, run.id, "pause_requested", {"by": params.by}, now)
                await conn.notify("cancel", [run.id])  # its worker's watcher reads it at once
            run = await self._locked_run(conn, run.id)
        self.hub.fire_all()
        return run

    async def run_resume(self, params: RunResumeParams) -> Run:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            run = await self._locked_run(conn, params.run_id)
            action = rules.plan_resume(run)
            if action == rules.PauseAction.RELEASE:
                held = await conn.fetchval(q.HELD_RUN_AT, run.id)
                await conn.execute(q.RESUME_RELEASE, run.id, rules.resumed_run_at(run, held, now))
                await conn.notify("queued")
            else:
                await conn.execute(q.RESUME_WITHDRAW, run.id)
            await self._log(conn, run.id, "resumed", {"by": params.by}, now)
            run = await self._locked_run(conn, run.id)
        self.hub.fire_all()
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


# -- helpers --------------------------------------------------------------------------


def _tenant_only(tenant: str | None) -> list[tuple[str, str, object]]:
    return [] if tenant is None else [("tenant", "=", tenant)]
