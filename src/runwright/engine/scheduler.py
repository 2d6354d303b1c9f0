"""The scheduler: every worker fires due schedules on each tick.

No leader: any number of workers may fire the same schedule at the same moment, because
a fire is an idempotent submission keyed by the schedule and its fire time, and moving
a schedule's next fire time is conditional (one worker wins, the others see it moved).
A crash between the two repeats the submission, which the key turns into a no-op.
"""

from __future__ import annotations

import logging
from typing import Callable

from ..clock import SYSTEM_CLOCK
from ..logs import event
from ..runs import Run
from ..schedules import Schedule, fire_key, fires_due
from ..store import Store
from ..store.params import RunInsertParams, ScheduleAdvanceParams, ScheduleDueParams

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(self, store: Store, clock: Callable[[], float] = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock

    async def tick(self, now: float | None = None) -> list[Run]:
        """Fire what is due at `now`; return the runs this tick created."""
        now = self._clock() if now is None else now
        fired: list[Run] = []
        for schedule in await self._store.schedule_due(ScheduleDueParams(now)):
            fired += await self._fire(schedule, now)
        return fired

    async def _fire(self, schedule: Schedule, now: float) -> list[Run]:
        times, upcoming = fires_due(schedule, now)
        runs = await self._store.run_insert_many([RunInsertParams(
            key=fire_key(schedule.name, schedule.tz, fire), task=schedule.task, args=schedule.args,
            queue=schedule.queue, priority=schedule.priority, max_attempts=schedule.max_attempts,
            run_at=fire, now=now) for fire in times]) if times else []
        await self._store.schedule_advance(ScheduleAdvanceParams(schedule.name, schedule.next_fire_at,
                                                                 upcoming))
        created = [run for run in runs if not run.existed]
        for run in created:
            event(logging.INFO, f"schedule {schedule.name!r} fired", run_id=run.id, task=run.task)
        return created
