"""The SQL store's schedules."""

from __future__ import annotations

from ...core._schedules import Schedule
from .._params import ScheduleAdvanceParams, ScheduleDueParams, SchedulePauseParams
from . import _statements as q
from ._base import SqlBase
from ._columns import schedule_from_row

__all__ = ["SqlSchedules"]


class SqlSchedules(SqlBase):
    """Schedules (`ScheduleStore`)."""

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

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> bool:
        return await self._change(q.SCHEDULE_ADVANCE, params.name, params.expected_next,
                                  params.next_fire_at) == 1

    async def schedule_set_paused(self, params: SchedulePauseParams) -> bool:
        return await self._change(q.SCHEDULE_PAUSE, params.name, params.paused, params.next_fire_at,
                                  self.clock.now(params.now)) == 1

    async def schedule_delete(self, name: str) -> bool:
        return await self._change(q.SCHEDULE_DELETE, name) == 1
