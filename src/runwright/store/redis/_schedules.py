"""The Redis store's schedules."""

from __future__ import annotations

import json

from ...core._schedules import Schedule
from .._params import ScheduleAdvanceParams, ScheduleDueParams, SchedulePauseParams
from ._base import RedisBase

__all__ = ["RedisSchedules"]


class RedisSchedules(RedisBase):
    """Schedules (`ScheduleStore`)."""

    # -- schedules ----------------------------------------------------------------------

    async def schedule_save(self, schedule: Schedule) -> Schedule:
        await self._script("schedule_save", schedule.name, json.dumps(list(schedule.definition())),
                           json.dumps([schedule.cron, schedule.tz]), schedule.paused,
                           float(schedule.next_fire_at), float(schedule.created_at),
                           float(schedule.updated_at))
        return {s.name: s for s in await self.schedule_list()}[schedule.name]

    async def schedule_list(self) -> list[Schedule]:
        pipe = self.redis.pipeline(transaction=False)
        for part in ("def", "paused", "next", "created", "updated"):
            pipe.hgetall(self.key(f"sched:{part}"))
        definitions, paused, upcoming, created, updated = await self._call(pipe.execute)
        return [Schedule(name, *json.loads(definitions[name]), paused.get(name) == "1",  # type: ignore[call-arg]
                         float(upcoming[name]), float(created[name]), float(updated[name]))
                for name in sorted(definitions)]

    async def schedule_due(self, params: ScheduleDueParams) -> list[Schedule]:
        now = await self._now(params.now)
        due = [s for s in await self.schedule_list() if not s.paused and s.next_fire_at <= now]
        return sorted(due, key=lambda s: s.next_fire_at)

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> bool:
        return bool(await self._script("schedule_advance", params.name, float(params.expected_next),
                                       float(params.next_fire_at)))

    async def schedule_set_paused(self, params: SchedulePauseParams) -> bool:
        now = await self._now(params.now)
        upcoming = None if params.next_fire_at is None else float(params.next_fire_at)
        return bool(await self._script("schedule_pause", params.name, params.paused, upcoming, now))

    async def schedule_delete(self, name: str) -> bool:
        return bool(await self._script("schedule_delete", name))
