"""The SQL store's threads."""

from __future__ import annotations

import json
from typing import Any

from ...core._journal import ThreadEvent
from ...errors import ThreadDeleted
from ...runs import Run, RunState
from .. import _rules as rules
from .._params import (
    RunInsertParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadForgetParams,
    ThreadGetParams,
    ThreadInfo,
    ThreadListParams,
    ThreadMessagesParams,
)
from . import _statements as q
from ._base import SqlBase
from ._columns import run_from_row
from ._dialect import SqlConnection

__all__ = ["SqlThreads"]

NO_RUN_BEFORE = 2**62  # "before run" when a thread's whole history is wanted


class SqlThreads(SqlBase):
    """Threads (`ThreadStore`), and submitting to one."""

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
            # Each row is RUN_COLUMNS and then the run's turn.
            turns = {int(row[0]): float(row[-1]) for row in rows if row[-1] is not None}
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
