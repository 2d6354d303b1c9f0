"""Column lists and row decoding for the runs, schedules and workers tables."""

from __future__ import annotations

import json
from typing import Any, Sequence

from ...core._schedules import Schedule
from ...runs import Run, RunState
from .._params import WorkerInfo, WorkerRegisterParams

__all__ = [
    "RUN_COLUMNS",
    "R_COLUMNS",
    "SCHEDULE_COLUMNS",
    "WORKER_COLUMNS",
    "run_from_row",
    "schedule_from_row",
    "worker_from_row",
    "worker_row",
]

RUN_COLUMNS = (
    "id, key, task, queue, priority, state, args, attempt, max_attempts, fence, run_at, "
    "created_at, timeout_s, owner, lease_expires_at, started_at, finished_at, result, error, "
    "recoveries, cancel_requested, last_seq, parent_id, budget, deadline_at, thread, interrupt, tenant, "
    "traceparent, version, waiting, pause_requested, forked_from, limits"
)
# The same, qualified by the alias `r`, for statements that join runs with another table.
R_COLUMNS = ", ".join(f"r.{column.strip()}" for column in RUN_COLUMNS.split(","))
SCHEDULE_COLUMNS = (
    "name, cron, tz, task, args, queue, priority, max_attempts, misfire, catch_up_limit, "
    "paused, next_fire_at, created_at, updated_at"
)
WORKER_COLUMNS = "id, host, pid, queues, tasks, started_at, heartbeat_at, version, majors"


def run_from_row(row: Sequence[Any]) -> Run:
    """Build a Run from a row selected with RUN_COLUMNS, in that order."""
    run = Run(
        row[0], row[1], row[2], row[3], row[4], RunState(row[5]), row[6], row[7], row[8],
        row[9], row[10], row[11], row[12], row[13], row[14], row[15], row[16], row[17],
        row[18], row[19], bool(row[20]), *row[21:34],
    )
    run.pause_requested = bool(row[31])
    return run


def schedule_from_row(row: Sequence[Any]) -> Schedule:
    schedule = Schedule(*row)
    schedule.paused = bool(schedule.paused)  # SQLite keeps booleans as integers
    return schedule


def worker_from_row(row: Sequence[Any]) -> WorkerInfo:
    majors = None if row[8] is None else json.loads(row[8])
    return WorkerInfo(row[0], row[1], row[2], json.loads(row[3]), json.loads(row[4]), row[5], row[6],
                      row[7], majors)


def worker_row(params: WorkerRegisterParams, now: float) -> tuple[Any, ...]:
    """The values of WORKER_INSERT: host, pid, queues, tasks, now, version, majors."""
    majors = None if params.majors is None else json.dumps(
        {task: list(majors) for task, majors in params.majors.items()})
    return (params.host, params.pid, json.dumps(list(params.queues)), json.dumps(list(params.tasks)),
            now, params.version, majors)
