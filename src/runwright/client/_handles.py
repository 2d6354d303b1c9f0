"""RunHandle: a reference to a run that works in any process: state, result, cancel.

A handle keeps the scope it came from (the App, or one tenant's view of it), so that
refreshing, following or cancelling it sees exactly what that scope may see.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Protocol

from ..core._journal import Event
from ..errors import RunWaitTimeout
from ..runs import Run, RunState, outcome_of

__all__ = ["RunAccess", "RunHandle"]


class RunAccess(Protocol):
    """What a handle asks of its scope (the App and its tenant views provide it)."""

    async def read_run(self, run_id: int) -> Run: ...

    async def cancel(self, run_id: int) -> Run: ...

    def events(self, run_id: int, after: int = 0, follow: bool = True) -> AsyncIterator[Event]: ...

    async def wait_done(self, run_id: int) -> Run: ...

    async def why_not_ended(self, run_id: int) -> str: ...


class RunHandle:
    __slots__ = ("_runs", "_run", "id")

    def __init__(self, runs: RunAccess, run: Run) -> None:
        self._runs = runs
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
        run = await self._runs.read_run(self.id)
        run.existed = self._run.existed
        self._run = run
        return run

    async def cancel(self) -> RunState:
        """Cancel: a queued run never starts; a running one stops within a second."""
        run = await self._runs.cancel(self.id)
        self._run = run
        return run.state

    def events(self, after: int = 0, follow: bool = True) -> AsyncIterator[Event]:
        """The run's events after `after`: what is logged, then (with follow) what comes,
        until the run has ended. Gapless and in order, in any process; resume from the
        last seq you saw and nothing is missed or repeated."""
        return self._runs.events(self.id, after=after, follow=follow)

    async def result(self, timeout_s: float | None = None) -> Any:
        """Wait for the run to end and return its value, or raise `RunFailed`/`RunCancelled`;
        past `timeout_s`, `RunWaitTimeout` says what the run waits for (it goes on).

        Wakes on the store's notifications (LISTEN/NOTIFY on PostgreSQL, the data-version
        poll on SQLite), re-reading the run after each; a slow fallback re-read covers a
        notification lost while a listener reconnected.
        """
        try:
            async with asyncio.timeout(timeout_s):
                run = await self._runs.wait_done(self.id)
        except TimeoutError:
            assert timeout_s is not None  # no other wait here times out
            raise RunWaitTimeout(self.id, timeout_s, await self._runs.why_not_ended(self.id)) from None
        self._run = run
        return outcome_of(run)
