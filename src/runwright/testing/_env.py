"""The Env: one worker of the app in this event loop, on a clock that skips ahead
whenever it is idle; and what a test reads of a run (its result, events, steps, tool calls)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ..app import App
from ..client._handles import RunHandle
from ..core._clock import OffsetClock
from ..core._journal import Event
from ..engine._worker import Worker
from ..errors import ConfigError
from ..store._hub import QUEUED
from ..store._params import RunNextDueParams, WorkerHeartbeatParams

__all__ = ["Env", "SkippingClock", "ToolCall"]

SETTLE_S = 0.02  # how long the worker may sit idle before the clock skips (real time)


class SkippingClock(OffsetClock):
    """This machine's clock, plus however far a test has skipped it ahead (`skipped_s`)."""

    __slots__ = ()

    @property
    def skipped_s(self) -> float:
        return self.offset_s

    def skip(self, seconds: float) -> None:
        self.offset_s += max(0.0, seconds)


class Env:
    """An App on `memory://` with one worker in this process and a clock that skips."""

    def __init__(self, app: App, **worker_options: Any) -> None:
        if not app.url.startswith("memory:"):
            raise ConfigError(f"runwright.testing needs an App on memory://, not {app.url}")
        self.app = app
        self.clock = SkippingClock()
        self._options = {"poll_s": 0.05, **worker_options}
        self._worker: Worker | None = None
        self._running: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Env:
        self.app.use_clock(self.clock)
        await self.app.open()
        self._worker = self.app.worker(**self._options)
        started = asyncio.Event()
        self._running = asyncio.create_task(self._worker.run(ready=lambda _w: started.set()))
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({waiting, self._running}, return_when=asyncio.FIRST_COMPLETED)
        if self._running.done():  # it could not start: say why
            waiting.cancel()
            await self._running
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._worker is not None and self._running is not None:
            self._worker.stop()
            await self._running
        await self.app.close()

    async def result(self, handle: RunHandle, timeout_s: float = 30.0) -> Any:
        """The run's result (or its RunFailed / RunCancelled), skipping the clock ahead
        whenever the worker has nothing to do until a later due time. `timeout_s` is real
        time: a run that waits on something no skip brings (an answer) times out."""
        outcome = asyncio.create_task(handle.result())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                done, _ = await asyncio.wait({outcome}, timeout=SETTLE_S)
                if done:
                    return outcome.result()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {handle.id} has not ended in {timeout_s} s of real time")
                await self.skip_to_next_due()
        finally:
            outcome.cancel()

    async def skip_to_next_due(self) -> float:
        """If the worker is idle and a queued run is due later, move the clock to then and
        wake the worker: the seconds skipped (0 when nothing was)."""
        worker = self._worker
        if worker is None or self._running is None or self._running.done() or not worker.idle:
            return 0.0
        registry = self.app.registry
        due_at = await self.app.store.run_next_due_at(RunNextDueParams(
            sorted({spec.queue for spec in registry.tasks.values()}), sorted(registry.tasks)))
        ahead_s = 0.0 if due_at is None else due_at - self.clock()
        if ahead_s <= 0:
            return 0.0
        # The worker's heartbeat first, at the new time: its own rescue must not find it a
        # day stale and take it for dead.
        await self.app.store.worker_heartbeat(WorkerHeartbeatParams(worker.id, now=self.clock() + ahead_s))
        self.clock.skip(ahead_s)
        self.app.store.hub.fire(QUEUED)
        return ahead_s

    async def event_kinds(self, handle: RunHandle) -> list[str]:
        """The kinds of the run's events, in order (`started`, `progress`, `succeeded`...)."""
        return [event.kind async for event in handle.events(follow=False)]

    async def steps(self, handle: RunHandle) -> list[tuple[str, Any]]:
        """The run's journal, in order: each completed step's name and recorded value."""
        return [(step.name, step.value())
                for step in await self.app.store.step_list(handle.id) if step.status == "done"]

    async def events(self, handle: RunHandle, kind: str | None = None) -> list[Event]:
        """The run's events so far, in order; only those of `kind` when given (an agent's
        `model` events carry each call's turn, usage and the tools it asked for)."""
        return [event async for event in handle.events(follow=False)
                if kind is None or event.kind == kind]

    async def assert_steps(self, handle: RunHandle, names: Sequence[str]) -> None:
        """Assert that the run's journal holds exactly these completed steps, in order
        (an agent's are `model`, `tool:<name>`, `approve:<name>`...)."""
        journaled = [name for name, _ in await self.steps(handle)]
        if journaled != list(names):
            raise AssertionError(f"run {handle.id} journaled the steps {journaled}, not {list(names)}")

    async def tool_calls(self, handle: RunHandle) -> list[ToolCall]:
        """The tool calls an agent's model asked for, in order, from the run's journal:
        each with its arguments and the result the model got back (None for a call that
        was never made: refused by a person, or cut by an interrupting message)."""
        calls: list[ToolCall] = []
        pending: list[int] = []  # the last reply's calls not yet made or refused
        for name, value in await self.steps(handle):
            kind, _, tool = name.partition(":")
            if name == "model":
                pending = []
                for asked in (value or {}).get("message", {}).get("tool_calls") or ():
                    pending.append(len(calls))
                    calls.append(ToolCall(asked["function"]["name"],
                                          _arguments(asked["function"].get("arguments"))))
                continue
            if kind not in ("tool", "approve"):
                continue
            index = next((i for i in pending if calls[i].name == tool), None)
            if index is None:
                continue
            if kind == "approve":
                if not (value or {}).get("value", {}).get("approved"):
                    pending.remove(index)  # refused: never made, no tool step comes
                continue
            pending.remove(index)
            calls[index] = replace(calls[index], result=value)
        return calls


def _arguments(raw: Any) -> Any:
    """A call's arguments as the tool would get them: the JSON object the model wrote
    (its raw text when it wrote something else)."""
    if not isinstance(raw, str):
        return raw if raw is not None else {}
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return raw


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call an agent's model asked for: the tool, its arguments and what the model
    got back (None when the call was never made)."""

    name: str
    arguments: Any
    result: str | None = None
