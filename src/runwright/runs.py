"""Run states, the one table of allowed transitions, and the Run record."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from .core._payloads import load
from .errors import InvalidTransition, RunCancelled, RunEnded, RunFailed

__all__ = [
    "CRITICAL",
    "HIGH",
    "LOW",
    "NORMAL",
    "PAUSED_RUN_AT",
    "RETRYABLE_STATES",
    "TERMINAL_STATES",
    "STORED_WAITS",
    "TRANSITIONS",
    "Run",
    "RunState",
    "WaitReason",
    "check_transition",
    "outcome_of",
    "sources_of",
]

CRITICAL, HIGH, NORMAL, LOW = 0, 1, 2, 3


class RunState(enum.StrEnum):
    """Where a run is in its life. `queued` covers "due later" (run_at in the future)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"
    INTERRUPTED = "interrupted"


class WaitReason(enum.StrEnum):
    """Why a queued run is not running. The first eight are recorded by the attempt that
    gave the slot back (a park, a retry's backoff), or by a throttle at submission, and
    hold while the run is not yet due;
    the rest are read from the world when asked (client `_why`)."""

    SLEEP = "sleep"  # a durable timer (ctx.sleep)
    ANSWER = "answer"  # a person's answer to its question (ctx.ask)
    SIGNAL = "signal"  # a signal it waits for (ctx.wait_signal)
    CHILDREN = "children"  # its child runs (ctx.gather, a chain's steps)
    RATE_LIMIT = "rate_limit"  # a model's rate limit, shared by the fleet
    RETRY = "retry"  # the backoff after a failed attempt
    PAUSED = "paused"  # paused (app.pause, on_exhausted="pause"): held until resumed
    THROTTLE = "throttle"  # a throttle of its key (rw.Throttle, on_excess="delay") made it due later
    SCHEDULED = "scheduled"  # submitted to start later (delay_s, run_at)
    WORKER = "worker"  # no live worker serves its task on its queue
    VERSION = "version"  # the workers that serve it do not run its app's major
    THREAD = "thread"  # another run of its thread goes first
    LIMIT = "limit"  # a concurrency limit of its key is full (rw.Limit)
    RATE = "rate"  # a rate of its key has no room for it in its window now (rw.Rate)
    SLOT = "slot"  # due and served: it waits for a free slot


# What a store keeps on a queued run (`Run.waiting`), written by the fenced end of the
# attempt that requeued it.
STORED_WAITS = frozenset({WaitReason.SLEEP, WaitReason.ANSWER, WaitReason.SIGNAL, WaitReason.CHILDREN,
                          WaitReason.RATE_LIMIT, WaitReason.RETRY, WaitReason.PAUSED,
                          WaitReason.THROTTLE})

# The due time of a paused run (queued, waiting "paused"): so far ahead (9999-12-31) that
# no claim, due count, next-due wait or unrunnable sweep ever sees it, with no change to
# any of them. Nothing that wakes a run (a child's end, an answer, a signal) wakes a
# paused one; only a resume makes it due again.
PAUSED_RUN_AT = 253402300799.0


# The one table of allowed transitions. Every store builds its guarded UPDATEs from it
# (`WHERE state IN sources_of(target)`), so no backend can move a run along an edge
# that is not here.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    # queued -> failed: a deadline passed, or unrunnable for too long; queued -> interrupted:
    # a newer run on its thread interrupted it before it started.
    RunState.QUEUED: frozenset(
        {RunState.RUNNING, RunState.CANCELLED, RunState.FAILED, RunState.INTERRUPTED}
    ),
    # running -> queued: a retry waiting out its backoff, a graceful give-back, a takeover;
    # never a manual retry, which takes only RETRYABLE_STATES (a live claim stays live).
    RunState.RUNNING: frozenset(
        {RunState.QUEUED, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD,
         RunState.INTERRUPTED}
    ),
    RunState.SUCCEEDED: frozenset(),
    RunState.FAILED: frozenset({RunState.QUEUED}),  # app.retry
    RunState.CANCELLED: frozenset(),
    RunState.DEAD: frozenset({RunState.QUEUED}),  # app.retry: out of the dead-letter queue
    RunState.INTERRUPTED: frozenset(),
}
TERMINAL_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD, RunState.INTERRUPTED}
)

# What a manual retry (`app.retry`, `runwright retry`, `POST /runs/{id}/retry`) takes back
# to queued: an end that another try may change. Not a live run (queued or running: its
# claim would be superseded and its step run twice), nor an end a person or the run's
# thread chose: succeeded, cancelled (someone said stop; its children were cancelled
# too), interrupted (its thread moved on to a newer message; answering the older one
# again would reorder the conversation). Those are submitted anew instead.
RETRYABLE_STATES = frozenset({RunState.DEAD, RunState.FAILED})


def sources_of(target: RunState) -> tuple[str, ...]:
    """States from which `target` may be entered, as strings for SQL parameters."""
    return tuple(sorted(s.value for s, targets in TRANSITIONS.items() if target in targets))


def check_transition(run_id: int, current: RunState, target: RunState) -> None:
    """Raise a clear error if `current -> target` is not in the table."""
    if target in TRANSITIONS[current]:
        return
    if current in TERMINAL_STATES:
        raise RunEnded(f"run {run_id} already ended {current.value}; cannot move to {target.value}")
    raise InvalidTransition(f"run {run_id}: {current.value} -> {target.value} is not allowed")


@dataclass(slots=True)
class Run:
    """A run as the store holds it. Times are epoch seconds."""

    id: int
    key: str
    task: str
    queue: str
    priority: int
    state: RunState
    args: str  # JSON object of keyword arguments
    attempt: int
    max_attempts: int
    fence: int
    run_at: float
    created_at: float
    timeout_s: float | None = None
    owner: int | None = None
    lease_expires_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    result: str | None = None  # JSON
    error: str | None = None  # JSON object: type, message, traceback
    recoveries: int = 0
    cancel_requested: bool = False
    last_seq: int = 0  # the number of the run's last event
    parent_id: int | None = None  # set on a child run started by ctx.submit
    budget: str | None = None  # JSON of a Budget
    deadline_at: float | None = None
    thread: str | None = None
    interrupt: str | None = None  # "interrupt" or "rollback": stop at the next step boundary
    tenant: str | None = None
    traceparent: str | None = None  # W3C, given at submission (None: the run's own trace)
    # The version of the app that submitted it; None: submitted before runs recorded one
    # (any worker that registers its task may run it).
    version: str | None = None
    # What the attempt that requeued it waits on (a WaitReason of STORED_WAITS), while it
    # is queued and not yet due; stale once it is due or claimed (read it through
    # client `_why`, which knows).
    waiting: str | None = None
    # Asked to pause (app.pause of a running run): it stops at its next step boundary,
    # and an end of its attempt that would requeue it pauses it instead.
    pause_requested: bool = False
    # The run this one was forked from (`RunHandle.fork`): its journal began as that
    # run's first steps. None for a run submitted as itself.
    forked_from: int | None = None
    # Its concurrency limits, JSON [[name, key, max], ...] computed at submission
    # (`tasks._concurrency`); None for a run of a task that declares none.
    limits: str | None = None
    existed: bool = field(default=False, compare=False)  # set by an idempotent submit
    # What the submission that returned it did, for a task with flow control (tasks._flow):
    # "new", "replaced" (`replaced` is the queued run it cancelled), "delayed" (a throttle
    # moved its due time), "debounced" (this queued run took the submission's arguments),
    # "batched" (this queued run took the submission as one more item) or "dropped" (a
    # throttle wrote nothing: this is the key's standing run). None for a run read
    # otherwise, or of a task without flow control.
    outcome: str | None = field(default=None, compare=False)
    replaced: int | None = field(default=None, compare=False)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def paused(self) -> bool:
        """Queued and held until a resume (not claimed, not woken)."""
        return self.state is RunState.QUEUED and self.waiting == WaitReason.PAUSED

    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = load(self.args)  # always a JSON object (an envelope opened)
        return arguments

    def value(self) -> Any:
        return None if self.result is None else load(self.result)

    def error_info(self) -> dict[str, Any] | None:
        return None if self.error is None else json.loads(self.error)


def outcome_of(run: Run) -> Any:
    """The value of a succeeded run; the matching exception otherwise."""
    if run.state is RunState.SUCCEEDED:
        return run.value()
    if run.state is RunState.CANCELLED:
        raise RunCancelled(run.id, run.state.value, run.error_info())
    raise RunFailed(run.id, run.state.value, run.error_info())
