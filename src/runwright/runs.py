"""Run states, the one table of allowed transitions, the Run record and the RunHandle."""

from __future__ import annotations

import asyncio
import enum
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator

from .errors import InvalidTransition, RunCancelled, RunEnded, RunFailed, RunNotFound

if TYPE_CHECKING:
    from .app import App
    from .journal import Event

__all__ = [
    "CRITICAL",
    "HIGH",
    "LOW",
    "NORMAL",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Run",
    "RunHandle",
    "RunState",
    "check_transition",
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


S = RunState
# The one table of allowed transitions. Every store builds its guarded UPDATEs from it
# (`WHERE state IN sources_of(target)`), so no backend can move a run along an edge
# that is not here.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    # queued -> failed: a deadline passed, or unrunnable for too long; queued -> interrupted:
    # a newer run on its thread interrupted it before it started.
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED, S.FAILED, S.INTERRUPTED}),
    # running -> queued: a retry waiting out its backoff, a graceful give-back, a takeover.
    S.RUNNING: frozenset(
        {S.QUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.DEAD, S.INTERRUPTED}
    ),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset({S.QUEUED}),  # app.retry
    S.CANCELLED: frozenset(),
    S.DEAD: frozenset({S.QUEUED}),  # app.retry: out of the dead-letter queue
    S.INTERRUPTED: frozenset(),
}
TERMINAL_STATES = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.DEAD, S.INTERRUPTED})


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
    existed: bool = field(default=False, compare=False)  # set by an idempotent submit

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def arguments(self) -> dict[str, Any]:
        return json.loads(self.args)

    def value(self) -> Any:
        return None if self.result is None else json.loads(self.result)

    def error_info(self) -> dict[str, Any] | None:
        return None if self.error is None else json.loads(self.error)


class RunHandle:
    """A reference to a run that works in any process: state, result, cancel."""

    __slots__ = ("_app", "_run", "id")

    def __init__(self, app: App, run: Run) -> None:
        self._app = app
        self._run = run
        self.id = run.id

    def __repr__(self) -> str:
        return f"<RunHandle {self.id} {self._run.task} {self._run.state.value}>"

    @property
    def run(self) -> Run:
        """The record as of the last refresh."""
        return self._run

    @property
    def state(self) -> RunState:
        return self._run.state

    @property
    def existed(self) -> bool:
        """True when submission found an existing run under the same key."""
        return self._run.existed

    async def refresh(self) -> Run:
        run = await self._app.store.run_get(self.id)
        if run is None:
            raise RunNotFound(f"run {self.id} not found")
        run.existed = self._run.existed
        self._run = run
        return run

    async def cancel(self) -> RunState:
        """Cancel: a queued run never starts; a running one stops within a second."""
        run = await self._app.cancel(self.id)
        self._run = run
        return run.state

    def events(self, after: int = 0, follow: bool = True) -> AsyncIterator[Event]:
        """The run's events after `after`: what is logged, then (with follow) what comes,
        until the run's terminal event. Gapless and in order, in any process; resume from
        the last seq you saw and nothing is missed or repeated."""
        return self._app.events(self.id, after=after, follow=follow)

    async def result(self, timeout_s: float | None = None) -> Any:
        """Wait for the run to end and return its value, or raise `RunFailed`/`RunCancelled`.

        Wakes on the store's notifications (LISTEN/NOTIFY on PostgreSQL, the data-version
        poll on SQLite), re-reading the run after each; a slow fallback re-read covers a
        notification lost while a listener reconnected.
        """
        async with asyncio.timeout(timeout_s):
            run = await self._app.wait_done(self.id)
        self._run = run
        return outcome_of(run)


def outcome_of(run: Run) -> Any:
    """The value of a succeeded run; the matching exception otherwise."""
    if run.state is RunState.SUCCEEDED:
        return run.value()
    if run.state is RunState.CANCELLED:
        raise RunCancelled(run.id, run.state.value, run.error_info())
    raise RunFailed(run.id, run.state.value, run.error_info())
