"""RunHandle: a reference to a run that works in any process: state, result, cancel.

A handle keeps the scope it came from (the App, or one tenant's view of it), so that
refreshing, following or cancelling it sees exactly what that scope may see.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Mapping, Protocol

from ..core._journal import Event
from ..core._signals import Signal
from ..errors import RunWaitTimeout
from ..runs import Run, RunState, outcome_of

__all__ = ["RunAccess", "RunHandle"]


class RunAccess(Protocol):
    """What a handle asks of its scope (the App and its tenant views provide it)."""

    async def read_run(self, run_id: int) -> Run: ...

    async def cancel(self, run_id: int) -> Run: ...

    async def pause(self, run_id: int) -> Run: ...

    async def resume(self, run_id: int) -> Run: ...

    def events(self, run_id: int, after: int = 0, follow: bool = True) -> AsyncIterator[Event]: ...

    async def wait_done(self, run_id: int) -> Run: ...

    async def why_not_ended(self, run_id: int) -> str: ...

    async def fork(self, run_id: int, from_step: int | str, *, args: Mapping[str, Any] | None = None,
                   key: str | None = None) -> RunHandle: ...

    async def signal(self, run_id: int, name: str, payload: Any = None, *, key: str | None = None,
                     by: str | None = None) -> Signal: ...


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

    def arguments(self) -> dict[str, Any]:
        """The arguments the run stored: as checked against the task's type hints and kept
        as JSON (`{"qty": 2}` for a `"2"` sent to an `int`). They never change after
        submission, so no refresh is needed."""
        return self._run.arguments()

    @property
    def existed(self) -> bool:
        """True when submission found an existing run under the same key."""
        return self._run.existed

    @property
    def outcome(self) -> str | None:
        """What the submission did, for a task with flow control (singleton, throttle,
        debounce, batch): "new", "replaced" (`replaced` is the queued run it cancelled),
        "delayed", "debounced" (this queued run took its arguments), "batched" (this
        queued run took it as one more item) or "dropped" (nothing written: this is the
        key's standing run). None otherwise."""
        return self._run.outcome

    @property
    def replaced(self) -> int | None:
        """The queued run a singleton's submission replaced (cancelled), else None."""
        return self._run.replaced

    async def refresh(self) -> Run:
        run = await self._runs.read_run(self.id)
        run.existed, run.outcome, run.replaced = self._run.existed, self._run.outcome, self._run.replaced
        self._run = run
        return run

    async def cancel(self) -> RunState:
        """Cancel: a queued run never starts; a running one stops within a second."""
        run = await self._runs.cancel(self.id)
        self._run = run
        return run.state

    async def pause(self) -> Run:
        """Pause (see `App.pause`): queued, held now; running, stopped at its next step."""
        self._run = await self._runs.pause(self.id)
        return self._run

    async def resume(self) -> Run:
        """Resume a paused run (see `App.resume`)."""
        self._run = await self._runs.resume(self.id)
        return self._run
    async def fork(self, from_step: int | str, *, args: Mapping[str, Any] | None = None,
                   key: str | None = None) -> RunHandle:
        """A new run that begins where this one was at `from_step` (a journal position, or
        a step's name: up to, not including, its first entry) and runs the rest on the
        code deployed now; `args` changes arguments (see `App.fork`)."""
        return await self._runs.fork(self.id, from_step, args=args, key=key)

    async def signal(self, name: str, payload: Any = None, *, key: str | None = None,
                     by: str | None = None) -> Signal:
        """Send the run signal `name` (see `App.signal`): kept until the run's
        `ctx.wait_signal(name)` takes it, once."""
        return await self._runs.signal(self.id, name, payload, key=key, by=by)

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
