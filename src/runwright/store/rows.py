"""What both SQL backends share: the column list, row decoding, fixed error payloads."""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..runs import Run, RunState

__all__ = [
    "RUN_COLUMNS", "cancelled_error", "deadline_error", "interrupted_error", "run_from_row",
    "step_event_data", "worker_lost_error", "SCHEDULE_COLUMNS",
]

RUN_COLUMNS = (
    "id, key, task, queue, priority, state, args, attempt, max_attempts, fence, run_at, "
    "created_at, timeout_s, owner, lease_expires_at, started_at, finished_at, result, error, "
    "recoveries, cancel_requested, last_seq, parent_id, budget, deadline_at, thread, interrupt, tenant"
)


def run_from_row(row: Sequence[Any]) -> Run:
    """Build a Run from a row selected with RUN_COLUMNS, in that order."""
    return Run(
        row[0], row[1], row[2], row[3], row[4], RunState(row[5]), row[6], row[7], row[8],
        row[9], row[10], row[11], row[12], row[13], row[14], row[15], row[16], row[17],
        row[18], row[19], bool(row[20]), *row[21:28],
    )


def deadline_error() -> str:
    return json.dumps({"type": "DeadlineExceeded",
                       "message": "the run's deadline passed before it ended"})


def worker_lost_error(recoveries: int) -> str:
    return json.dumps({
        "type": "WorkerLost",
        "message": f"its worker was lost {recoveries} times; a run that keeps killing its "
                   f"workers goes to the dead-letter queue",
    })


def cancelled_error(reason: str = "cancelled on request") -> str:
    return json.dumps({"type": "Cancelled", "message": reason})


def interrupted_error() -> str:
    return json.dumps({"type": "Interrupted", "message": "interrupted by a newer run on its thread"})


def step_event_data(p: Any) -> str:
    """The `step` event that logs a journal write (the result stays in the journal)."""
    data = {"position": p.position, "name": p.name, "status": p.status}
    if p.error is not None:
        data["error"] = json.loads(p.error).get("type")
    return json.dumps(data)


SCHEDULE_COLUMNS = (
    "name, cron, tz, task, args, queue, priority, max_attempts, misfire, catch_up_limit, "
    "paused, next_fire_at, created_at, updated_at"
)
