"""The scheduler: every worker fires due schedules on each tick.

No leader: any number of workers may fire the same schedule at the same moment, because
a fire is an idempotent submission keyed by the schedule and its fire time, and moving
a schedule's next fire time is conditional (one worker wins, the others see it moved).
A crash between the two repeats the submission, which the key turns into a no-op.

So a fire whose key already names a run gets that run, not a second one. When that run
was submitted otherwise (another task, other arguments, queue or priority: someone
submitted by hand under the key, say), the fire is not made and the scheduler says so
at WARNING, naming the schedule, the key, the run and what differs: never silently.

A fire of a task with flow control is decided as a submission of its arguments is (its
singleton, throttle, debounce or batch), fire by fire: a singleton's refusal skips that
fire (said at INFO), and the schedule moves on all the same.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from ..core._clock import SYSTEM_CLOCK, Clock
from ..core._schedules import Schedule, fire_key, fires_due, next_fire_after
from ..errors import InvalidInput, SingletonTaken
from ..observe._logs import event
from ..runs import Run
from ..store._flow_rules import NEW, NO_NEW_RUN
from ..store._interface import Store
from ..store._params import RunInsertParams, ScheduleAdvanceParams, ScheduleDueParams
from ..tasks._submission import key_conflict
from ._crashpoints import crash_point

__all__ = ["Scheduler", "save_schedule", "save_schedules"]


async def save_schedule(store: Store, schedule: Schedule, now: float) -> Schedule:
    """Store a schedule (declared in code, or created or redefined at run time); its next
    fire time is the first after `now` (the store keeps the stored one unless the cron or
    time zone changed)."""
    schedule.next_fire_at = next_fire_after(schedule.cron, schedule.tz, now)
    schedule.created_at = schedule.updated_at = now
    return await store.schedule_save(schedule)


async def save_schedules(store: Store, schedules: Iterable[Schedule], now: float) -> None:
    """Save every schedule declared in code (each worker does this when it starts)."""
    for schedule in schedules:
        await save_schedule(store, schedule, now)


class Scheduler:
    def __init__(self, store: Store, clock: Callable[[], float] = SYSTEM_CLOCK,
                 version: str | None = None,
                 flow: Callable[[str, str], RunInsertParams | None] = lambda _task, _args: None) -> None:
        self._store = store
        self._version = version  # recorded on the runs it fires: its app's
        # A run of (task, args JSON) as a submission makes it (None: the task declares no
        # flow control): a fired run is held by its task's limits, rates and fair share,
        # and decided by its singleton, throttle, debounce or batch, as a submitted one is.
        self._flow = flow
        self._clock = clock if isinstance(clock, Clock) else Clock(clock)

    async def tick(self, now: float | None = None) -> list[Run]:
        """Fire what is due at `now`; return the runs this tick created."""
        now = self._clock.now(now)
        fired: list[Run] = []
        for schedule in await self._store.schedule_due(ScheduleDueParams(now)):
            fired += await self._fire(schedule, now)
        return fired

    async def _fire(self, schedule: Schedule, now: float) -> list[Run]:
        times, upcoming = fires_due(schedule, now)
        try:
            made = self._flow(schedule.task, schedule.args)
        except InvalidInput as exc:  # a key its arguments cannot make ({tenant}: none)
            event(logging.ERROR, f"schedule {schedule.name!r} did not fire: {exc}", schedule=schedule.name)
            times = []
            made = None
        # What a submission of the schedule's arguments carries (None: nothing of the kind).
        carried: dict[str, Any] = {} if made is None else {
            "limits": made.limits, "flow": made.flow, "merge": made.merge, "items": made.items}
        inserts = [RunInsertParams(
            key=fire_key(schedule.name, schedule.tz, fire), task=schedule.task, args=schedule.args,
            queue=schedule.queue, priority=schedule.priority, max_attempts=schedule.max_attempts,
            run_at=fire, version=self._version, now=now, **carried)
            for fire in times]
        if made is None or made.flow is None:
            runs: list[Run | None] = list(await self._store.run_insert_many(inserts) if inserts else [])
        else:  # each fire decided on the one before it, and a refusal is one fire's
            runs = [await self._decided(schedule, params) for params in inserts]
        if inserts:
            crash_point("schedule.after_insert", schedule.name)
        await self._store.schedule_advance(ScheduleAdvanceParams(
            schedule.name, schedule.next_fire_at, upcoming))
        created = []
        for run, params in zip(runs, inserts):
            if run is None:
                continue
            if run.outcome in NO_NEW_RUN:  # it joined, or was answered by, the key's run
                event(logging.INFO, f"schedule {schedule.name!r} fired into run {run.id} ({run.outcome})",
                      schedule=schedule.name, key=params.key, run_id=run.id, outcome=run.outcome)
                continue
            # The run a re-fire finds is this fire's own (the same definition): nothing to
            # say. Another's, submitted otherwise, stands in for no fire: say so.
            conflict = key_conflict(run, params)
            if conflict is not None:
                event(logging.WARNING, f"schedule {schedule.name!r} did not fire: its key {params.key!r} "
                      f"names run {run.id}, submitted with {conflict.detail}", schedule=schedule.name,
                      key=params.key, run_id=run.id, differs=",".join(conflict.differs))
            if not run.existed:
                created.append(run)
        for run in created:
            event(logging.INFO, f"schedule {schedule.name!r} fired", run_id=run.id, task=run.task,
                  **({"outcome": run.outcome} if run.outcome not in (None, NEW) else {}))
        return created

    async def _decided(self, schedule: Schedule, params: RunInsertParams) -> Run | None:
        """One fire of a task with flow control: a singleton whose key's run is still
        queued or running refuses it (the fire is skipped, and said: an overlap of a cron
        job is not made), as it refuses a submission; None then."""
        try:
            (run,) = await self._store.run_insert_many([params])
        except SingletonTaken as exc:
            event(logging.INFO, f"schedule {schedule.name!r} skipped a fire: {exc}", schedule=schedule.name,
                  key=params.key, run_id=exc.run_id)
            return None
        except InvalidInput as exc:  # a merge that failed, or merged arguments refused: this fire's
            event(logging.ERROR, f"schedule {schedule.name!r} did not fire: {exc}", schedule=schedule.name,
                  key=params.key)
            return None
        return run
