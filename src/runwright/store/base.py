"""The Store interface: what the engine and the App may ask of a backend.

Operations are named noun-verb-qualifier (`run_claim`, `run_finish_many`) and take one
params object each, with an injectable `now` so tests can drive time even inside SQL.
Every write after a claim carries `(run_id, fence)` and changes nothing if the fence is
no longer current; the caller turns "refused" into `LeaseLost`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ..journal import Event, StepRecord
from ..runs import Run, RunState
from ..schedules import Schedule
from .hub import Hub

__all__ = [
    "DEFAULT_SCHEMA",
    "EventAppendParams",
    "RunClaimParams",
    "RunExtendParams",
    "RunExtendResult",
    "RunFinishParams",
    "RunInsertParams",
    "RunListParams",
    "RunRescueParams",
    "StepRecordParams",
    "ON_BUSY",
    "QueueStat",
    "ThreadAppendParams",
    "Store",
    "WorkerInfo",
    "WorkerRegisterParams",
    "now_s",
]

DEFAULT_SCHEMA = "runwright"
ON_BUSY = ("reject", "enqueue", "interrupt", "rollback")
QueueStat = tuple[str, str, int, "float | None"]  # queue, state, count, oldest due run_at


def now_s() -> float:
    """The clock every store uses unless a params object brings its own `now`."""
    return time.time()


@dataclass(slots=True)
class RunInsertParams:
    """One run to submit. `key` names it: a second insert of the same key returns the first."""

    key: str
    task: str
    args: str
    queue: str = "default"
    priority: int = 2
    max_attempts: int = 4
    timeout_s: float | None = None
    run_at: float | None = None  # defaults to now
    parent_id: int | None = None
    budget: str | None = None  # JSON of a Budget
    deadline_at: float | None = None
    thread: str | None = None
    tenant: str | None = None
    now: float | None = None


@dataclass(slots=True)
class RunListParams:
    """Filter for listing runs, newest first; `before_id` pages backwards."""

    states: Sequence[RunState] = ()
    task: str | None = None
    queue: str | None = None
    thread: str | None = None
    tenant: str | None = None
    created_after: float | None = None  # a time range over submission times
    created_before: float | None = None
    limit: int = 100
    before_id: int | None = None


@dataclass(slots=True)
class RunClaimParams:
    """Claim up to `limit` due runs of `queues` whose task is one of `tasks`."""

    worker_id: int
    queues: Sequence[str]
    tasks: Sequence[str]
    limit: int
    lease_s: float
    now: float | None = None


@dataclass(slots=True)
class RunExtendParams:
    """Renew the leases of runs this worker still believes it owns."""

    worker_id: int
    runs: Sequence[tuple[int, int]]  # (run_id, fence)
    lease_s: float
    now: float | None = None


@dataclass(slots=True)
class RunExtendResult:
    lost: list[int] = field(default_factory=list)  # fence superseded: abandon these
    cancel_requested: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RunFinishParams:
    """A fenced end of an attempt.

    `state` is the target: succeeded/failed/dead/cancelled end the run; queued re-queues
    it at `run_at` (a retry after backoff). `release=True` with queued gives the run back
    untouched (graceful stop): the attempt does not count.
    """

    run_id: int
    fence: int
    state: RunState
    result: str | None = None
    error: str | None = None
    run_at: float | None = None
    release: bool = False
    # The event that records this end; the kind defaults to the target state
    # ("retrying" for a retry, "released" for a give-back).
    event_kind: str | None = None
    event_data: str = "{}"
    now: float | None = None

    @property
    def kind(self) -> str:
        if self.event_kind is not None:
            return self.event_kind
        if self.state is RunState.QUEUED:
            return "released" if self.release else "retrying"
        return self.state.value


@dataclass(slots=True)
class StepRecordParams:
    """Journal one step at `position`, fenced: refused if the claim was superseded."""

    run_id: int
    fence: int
    position: int
    name: str
    status: str  # "started" (an at-most-once mark), then "done" or "failed"
    result: str | None = None
    error: str | None = None
    now: float | None = None


@dataclass(slots=True)
class EventAppendParams:
    """Append events (kind, JSON data) to a run's log, fenced."""

    run_id: int
    fence: int
    events: Sequence[tuple[str, str]]
    now: float | None = None


@dataclass(slots=True)
class ThreadAppendParams:
    """Add one message to a thread's history, fenced by the run that produced it."""

    run_id: int
    fence: int
    thread: str
    idx: int  # its index within the run: a replayed append of the same index is a no-op
    message: str  # JSON
    now: float | None = None


@dataclass(slots=True)
class RunRescueParams:
    """Take back runs whose owner is dead (backend-specific test) or whose lease expired.

    A rescued run goes back to queued without using an attempt; after `max_recoveries`
    takeovers it goes `dead` instead, so a run that kills every worker stops circulating.
    `worker_stale_s` is how old a heartbeat may be before its worker counts as dead on
    stores without a session-bound liveness mark.
    """

    max_recoveries: int = 20
    worker_stale_s: float = 10.0
    now: float | None = None


@dataclass(slots=True)
class WorkerRegisterParams:
    host: str
    pid: int
    queues: Sequence[str]
    tasks: Sequence[str]
    now: float | None = None


@dataclass(slots=True)
class WorkerInfo:
    id: int
    host: str
    pid: int
    queues: list[str]
    tasks: list[str]
    started_at: float
    heartbeat_at: float


class Store(Protocol):
    """What every backend provides. See the conformance scenarios for the behaviour."""

    url: str
    hub: Hub
    schema_version_known: int

    async def open(self) -> None:
        """Connect and check the schema: refuse (SchemaError) a newer one or a missing one."""

    async def close(self) -> None: ...

    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied."""

    async def schema_version(self) -> int: ...

    async def listen(self) -> None:
        """Start delivering change notifications into `hub` (idempotent)."""

    async def run_insert_many(self, params: Sequence[RunInsertParams]) -> list[Run]: ...

    async def run_get(self, run_id: int) -> Run | None: ...

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]: ...

    async def run_list(self, params: RunListParams) -> list[Run]: ...

    async def run_count_by_state(self, tenant: str | None = None) -> dict[str, int]:
        """Runs by state (of one tenant's runs when given)."""

    async def run_queue_stats(self, now: float,
                              tenant: str | None = None) -> list[QueueStat]:
        """(queue, state, count, oldest due run_at among queued due runs) per queue and state."""

    async def run_claim(self, params: RunClaimParams) -> list[Run]: ...

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult: ...

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        """Apply fenced finishes; return the ids whose fence was refused."""

    async def run_cancel(self, run_id: int, now: float | None = None) -> Run:
        """queued -> cancelled at once; running -> cancel requested (the owner stops it).
        Open descendants (child runs, their children ...) are cancelled the same way."""

    async def run_retry(self, run_id: int, now: float | None = None) -> Run:
        """dead/failed -> queued with fresh attempts."""

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]: ...

    async def run_expire_many(self, now: float | None = None) -> list[Run]:
        """End `failed` (DeadlineExceeded) every open run whose deadline has passed."""

    async def run_next_due_at(self, queues: Sequence[str], tasks: Sequence[str]) -> float | None: ...

    async def run_count_due_by_task(self, queues: Sequence[str], due_before: float) -> dict[str, int]:
        """Queued runs of `queues` due before `due_before`, counted by task."""

    async def step_list(self, run_id: int) -> list[StepRecord]:
        """The run's journal, in position order."""

    async def step_record(self, params: StepRecordParams) -> bool:
        """Journal a step; False when the fence was refused (nothing written). A position
        marked "started" may be completed once ("done"/"failed"); nothing else rewrites it."""

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        """Append to the run's log; the new seqs, or None when the fence was refused."""

    async def event_list(self, run_id: int, after: int = 0, limit: int = 1000) -> list[Event]:
        """Events with seq > `after`, in order."""

    async def run_insert_threaded(self, params: RunInsertParams, on_busy: str) -> Run:
        """Submit to `params.thread`, applying the busy policy to its open runs at once:
        reject (ThreadBusy, nothing stored), enqueue (runs after them), interrupt or
        rollback (they stop at their next step boundary; a queued one ends `interrupted`
        now). A deleted thread raises ThreadDeleted; an existing key returns its run."""

    async def thread_messages(self, thread: str, before_run: int | None = None) -> list[tuple[int, int, str]]:
        """(run_id, idx, message JSON) of the history, in order; ThreadDeleted if deleted."""

    async def thread_append(self, params: ThreadAppendParams) -> bool:
        """Fenced; False when the run's claim was superseded."""

    async def thread_forget_run(self, run_id: int, fence: int) -> bool:
        """Rollback: drop what this run added to its thread (fenced)."""

    async def thread_delete(self, thread: str, purge: bool, now: float | None = None) -> bool:
        """Mark the thread deleted (new submissions refused); with purge, drop its history.
        False if it does not exist."""

    async def schedule_save(self, schedule: Schedule) -> Schedule:
        """Create, or update the definition of, a schedule (its paused state is kept; its
        next fire time is kept unless the cron or time zone changed)."""

    async def schedule_list(self) -> list[Schedule]: ...

    async def schedule_due(self, now: float) -> list[Schedule]:
        """Schedules not paused whose next fire time has come."""

    async def schedule_advance(self, name: str, expected_next: float, next_fire_at: float) -> bool:
        """Move the next fire time, only if it is still `expected_next` (one worker wins)."""

    async def schedule_set_paused(self, name: str, paused: bool, next_fire_at: float | None = None) -> bool:
        """Pause or resume (a resume may set the next fire time). False if unknown."""

    async def schedule_delete(self, name: str) -> bool: ...

    async def worker_register(self, params: WorkerRegisterParams) -> int: ...

    async def worker_heartbeat(self, worker_id: int, now: float | None = None) -> bool:
        """Refresh liveness; False if the worker's registration is gone (it was declared dead)."""

    async def worker_deregister(self, worker_id: int) -> None: ...

    async def worker_list(self) -> list[WorkerInfo]: ...
