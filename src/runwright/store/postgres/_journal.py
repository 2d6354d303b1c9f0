"""The PostgreSQL store's hot path of the journal and the log: steps and events appended."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

import asyncpg

from ...errors import LeaseLost
from .. import _rules as rules
from .._hub import events_topic
from .._params import EventAppendParams, StepRecordParams, StepTransaction
from . import _sql as sql
from ._base import PostgresBase
from ._foreign import caller_connection

__all__ = ["PostgresJournal"]


class PostgresJournal(PostgresBase):
    """Journal steps and log appends (`JournalStore`; the reads are `..sql.journal`)."""

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        if not params:
            return []
        rules.check_one_step_per_run(params)
        now = self.clock.now(params[0].now)
        rows = await self._fetch_raw(sql.RECORD_STEPS, _steps(params), now, self.channels["events"])
        recorded = {row[0] for row in rows}
        for p in params:
            self.hub.fire(events_topic(p.run_id))
        return [p.run_id in recorded or await self._step_confirmed(p) for p in params]

    @asynccontextmanager
    async def step_transaction(self) -> AsyncIterator[StepTransaction]:
        """The application's writes and the step's journal entry in one transaction of a
        session of the store's pool (READ COMMITTED, the server's default). Its statements
        name no schema, so the application's tables are found on the session's own
        search_path; ours are qualified. The fence is checked last, by RECORD_STEPS's
        UPDATE of the run's row: that row lock is held to the commit, so a takeover's
        claim is ordered after it (and reads this entry) or before it (and this commit
        writes nothing: LeaseLost, everything rolled back)."""
        async with self._conn() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                held = StepTransaction(conn)
                yield held
                record = held.record
                if record is None:
                    await transaction.rollback()  # a replay's writes never land
                    return
                await self._record_in(conn, record)
            except BaseException:
                await transaction.rollback()
                raise
            await transaction.commit()
        self.hub.fire(events_topic(record.run_id))

    async def step_record_in(self, connection: Any, record: StepRecordParams) -> None:
        """The entry written in the caller's open transaction: it commits with the caller's
        writes. The run's row stays locked to that commit, so the caller commits soon."""
        await self._record_in(caller_connection(connection), record)

    async def _record_in(self, conn: asyncpg.Connection, record: StepRecordParams) -> None:
        """Journal `record` in `conn`'s open transaction, fenced (LeaseLost if refused)."""
        now = self.clock.now(record.now)
        if not await conn.fetch(self._sql(sql.RECORD_STEPS), _steps([record]), now, self.channels["events"]):
            raise LeaseLost(record.run_id, record.fence)

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


def _steps(params: Sequence[StepRecordParams]) -> str:
    """RECORD_STEPS's $1: the steps, with their `step` events' data, in run id order (as
    the finish batch and the renewals lock their runs)."""
    return json.dumps([[p.run_id, p.fence, p.position, p.name, p.status, p.result, p.error,
                        rules.step_event(p.position, p.name, p.status, p.error)]
                       for p in sorted(params, key=lambda p: p.run_id)])
