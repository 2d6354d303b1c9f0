"""The SQL store's journal and log, as read."""

from __future__ import annotations

import json

from ...core._journal import Event, StepRecord
from .._params import EventListParams
from . import _statements as q
from ._base import SqlBase

__all__ = ["SqlJournal"]


class SqlJournal(SqlBase):
    """Reading the journal and the log (`JournalStore`; the writes are the dialect's hot path)."""

    # -- the journal and the log --------------------------------------------------------

    async def step_list(self, run_id: int) -> list[StepRecord]:
        return [StepRecord(*row) for row in await self._fetch(q.LIST_STEPS, run_id)]

    async def step_list_resumable(self, run_id: int) -> list[StepRecord]:
        return [StepRecord(*row) for row in await self._fetch(q.LIST_STEPS_RESUMABLE, run_id)]

    async def event_list(self, params: EventListParams) -> list[Event]:
        rows = await self._fetch(q.LIST_EVENTS, params.run_id, params.after, params.limit)
        return [Event(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]
