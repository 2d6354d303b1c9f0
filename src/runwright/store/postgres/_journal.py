"""The PostgreSQL store's hot path of the journal and the log: steps and events appended."""

from __future__ import annotations

import json
from typing import Sequence

from .. import _rules as rules
from .._hub import events_topic
from .._params import EventAppendParams, StepRecordParams
from . import _sql as sql
from ._base import PostgresBase

__all__ = ["PostgresJournal"]


class PostgresJournal(PostgresBase):
    """Journal steps and log appends (`JournalStore`; the reads are `..sql.journal`)."""

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
