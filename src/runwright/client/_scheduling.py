"""Schedule operations: checked definitions, and saving, pausing, resuming, deleting.

Schedules are the deployment's, not a tenant's: their runs are submitted by no tenant,
and only the App (the operator's face) lists or changes them; a tenant's view has none
of their operations (over HTTP: 403 for a tenant's token).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core import _inputs as inputs
from ..core._clock import Clock
from ..core._schedules import MISFIRE_POLICIES, Schedule, check_cron, next_fire_after, parse_zone
from ..engine._scheduler import save_schedule
from ..errors import InvalidInput, ScheduleNotFound
from ..store._interface import Store
from ..store._params import SchedulePauseParams
from ..tasks._limits import Limits
from ..tasks._registry import Registry
from ..tasks._specs import TaskSpec
from ..tasks._submission import Submission, insert_params

__all__ = ["Schedules"]


class Schedules:
    def __init__(self, registry: Registry, store: Store, clock: Clock, limits: Limits) -> None:
        self._registry = registry
        self._store = store
        self._clock = clock
        self._limits = limits

    def use_clock(self, clock: Clock) -> None:
        self._clock = clock

    def define(self, name: str, *, cron: str, task: TaskSpec | str, args: Mapping[str, Any] | None,
               tz: str, misfire: str, catch_up_limit: int, queue: str | None,
               priority: int | None) -> Schedule:
        """A checked Schedule (malformed cron, unknown zone or task, bad args: InvalidInput)."""
        _check_name(name)
        check_cron(cron)
        parse_zone(tz)
        if misfire not in MISFIRE_POLICIES:
            raise InvalidInput(f"misfire must be one of {', '.join(MISFIRE_POLICIES)}, got {misfire!r}")
        if not isinstance(catch_up_limit, int) or catch_up_limit < 1:
            raise InvalidInput(f"catch_up_limit must be a positive int, got {catch_up_limit!r}")
        spec = self._registry.task_spec(task)
        # Checked as a submission would be; each fire gets its own key from its time.
        params = insert_params(spec, spec.bind((), dict(args or {})),
                               Submission(key=f"schedule:{name}", priority=priority, queue=queue),
                               now_s=self._clock(), limits=self._limits)
        return Schedule(name, cron, tz, spec.name, params.args, params.queue, params.priority,
                        params.max_attempts, misfire, catch_up_limit)

    async def save(self, schedule: Schedule, now: float | None = None) -> Schedule:
        return await save_schedule(self._store, schedule, self._clock.now(now))

    async def list(self) -> list[Schedule]:
        return await self._store.schedule_list()

    async def pause(self, name: str) -> None:
        _check_name(name)
        if not await self._store.schedule_set_paused(SchedulePauseParams(name, True)):
            raise ScheduleNotFound(f"unknown schedule {name!r}")

    async def resume(self, name: str, now: float | None = None) -> None:
        """Resume from now on: fires missed while paused are not made up."""
        _check_name(name)
        found = {s.name: s for s in await self._store.schedule_list()}.get(name)
        if found is None:
            raise ScheduleNotFound(f"unknown schedule {name!r}")
        upcoming = next_fire_after(found.cron, found.tz, self._clock.now(now))
        await self._store.schedule_set_paused(SchedulePauseParams(name, False, upcoming))

    async def delete(self, name: str) -> None:
        """Delete a stored schedule. One declared in code comes back when a worker starts."""
        _check_name(name)
        if not await self._store.schedule_delete(name):
            raise ScheduleNotFound(f"unknown schedule {name!r}")


def _check_name(name: Any) -> None:
    inputs.name(name, "schedule name")
    if ":" in name:  # a fire's key is `schedule:{name}:{time}`
        raise InvalidInput(f"schedule name must be a non-empty string without ':', got {name!r}")
