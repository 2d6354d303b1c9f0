"""Schedules: cron with time zones (DST included), misfire policies, and the fire times
a tick owes.

A fire is a run keyed `schedule:<name>:<local fire time>`: every worker may fire, and
any number of them firing the same time make one run. Keying by the local wall-clock
time also makes the hour repeated when DST ends fire once, not twice; a time that DST
skips (02:30 on the spring-forward night) fires at the first valid time after it.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..errors import InvalidInput

if TYPE_CHECKING:
    import zoneinfo

__all__ = [
    "MISFIRE_POLICIES", "SKIP_GRACE_S", "Schedule", "check_cron", "clock_from_env", "fire_key",
    "fires_due",
    "next_fire_after", "parse_zone",
]

MISFIRE_POLICIES = ("skip", "catch_up")
# With `skip`, a fire time this late is still fired (a worker ticking a little late, or
# restarting): only older missed times are skipped.
SKIP_GRACE_S = 60.0


@dataclass(slots=True)
class Schedule:
    """A schedule as the store holds it. `args` is the task's keyword arguments as JSON."""

    name: str
    cron: str
    tz: str
    task: str
    args: str
    queue: str = "default"
    priority: int = 2
    max_attempts: int = 4
    misfire: str = "skip"
    catch_up_limit: int = 10
    paused: bool = False
    next_fire_at: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0

    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = json.loads(self.args)  # a JSON object, as encoded
        return arguments

    def definition(self) -> tuple[Any, ...]:
        """What a declaration in code decides (not the run-time state: paused, next fire)."""
        return (self.cron, self.tz, self.task, self.args, self.queue, self.priority,
                self.max_attempts, self.misfire, self.catch_up_limit)


def clock_from_env(value: str | None) -> Callable[[], float] | None:
    """A scheduler clock from RUNWRIGHT_SCHEDULE_CLOCK="<anchor>:<start>:<speed>" (epoch
    seconds, seconds, factor): at wall time `anchor` it reads `start` and runs `speed`
    times as fast. The anchor is absolute, so every process given it agrees on the time.
    Tests use it to run days of cron in seconds; unset, workers use the system clock."""
    if not value:
        return None
    try:
        anchor, start, speed = (float(part) for part in value.split(":"))
    except ValueError:
        raise InvalidInput(f"RUNWRIGHT_SCHEDULE_CLOCK={value!r}: expected anchor:start:speed") from None
    return lambda: start + (time.time() - anchor) * speed


def parse_zone(name: str) -> zoneinfo.ZoneInfo:
    import zoneinfo  # a zone is read only by a schedule that names one: not at every start

    try:
        return zoneinfo.ZoneInfo(name)
    # ValueError: not a zone's key (a NUL, a path); OSError: a key too long to be a file name.
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidInput(f"unknown time zone {name!r}: use an IANA name such as "
                           f"'Europe/Paris' or 'UTC'") from exc


def check_cron(expression: str) -> None:
    """Malformed cron is a clear error (5 fields, or 6 with seconds last, as croniter)."""
    from croniter import croniter  # here: with dateutil, 20 ms of every process's start

    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise InvalidInput(f"malformed cron {expression!r}: expected 5 fields (minute hour day "
                           f"month weekday) or 6 with seconds last, e.g. '0 9 * * 1-5'")


def next_fire_after(cron: str, tz: str, after: float) -> float:
    """The first fire time strictly after `after` (epoch seconds)."""
    from croniter import CroniterBadCronError, CroniterBadDateError, croniter

    zone = parse_zone(tz)
    start = dt.datetime.fromtimestamp(after, zone)
    try:
        fire_at: dt.datetime = croniter(cron, start).get_next(dt.datetime)  # croniter is untyped
        return fire_at.timestamp()
    except (CroniterBadCronError, CroniterBadDateError) as exc:
        raise InvalidInput(f"cron {cron!r} has no next fire time: {exc}") from exc


def fires_due(schedule: Schedule, now: float) -> tuple[list[float], float]:
    """The fire times owed at `now` (by the misfire policy) and the next one after `now`.

    `skip` fires the latest missed time if it is less than SKIP_GRACE_S late, and skips the
    rest; `catch_up` fires every missed time, the latest `catch_up_limit` of them (so a
    schedule left behind for a year does not flood the queue)."""
    missed = []
    fire = schedule.next_fire_at
    while fire <= now:
        missed.append(fire)
        fire = next_fire_after(schedule.cron, schedule.tz, fire)
        if len(missed) > max(schedule.catch_up_limit, 1) * 4 + 1000:
            break  # the rest would be dropped anyway
    if schedule.misfire == "skip":
        missed = [fire for fire in missed[-1:] if now - fire <= SKIP_GRACE_S]
    else:
        missed = missed[-schedule.catch_up_limit:]
    upcoming = fire if fire > now else next_fire_after(schedule.cron, schedule.tz, now)
    return missed, upcoming


def fire_key(name: str, tz: str, fire: float) -> str:
    """The run key of one fire: the local wall-clock time, without offset (see module doc)."""
    local = dt.datetime.fromtimestamp(fire, parse_zone(tz)).replace(tzinfo=None)
    return f"schedule:{name}:{local.isoformat()}"
