"""Unit-testing a user's own tasks and agents: in one process, in milliseconds, with a
clock that skips ahead over durable sleeps, timers and retry backoffs (Temporal's
time-skipping test environment does the same for workflows).

    app = rw.App("memory://")            # or RUNWRIGHT_URL=memory:// for an app of a module

    async def test_onboarding():
        async with runwright.testing.Env(app) as env:
            handle = await app.submit(onboard, "ada")
            assert await env.result(handle) == "welcome, ada"   # a 1-day ctx.sleep: ~ms
            assert "progress" in await env.event_kinds(handle)

The Env runs one worker of the app in this event loop, and whenever that worker is idle
(nothing running, nothing claimed) while a queued run is due later, moves the clock to
that run's due time: a sleep, a backoff or a timer ends at once, and the run sees the time
it waited for (`ctx.sleep(86400)` returns with a day gone by on the App's clock). Runs
waiting on something else (an answer, a child) are left to it.

An agent is tested the same way, with a `ScriptedModel` in place of its model: it replies
from a script (text, or tool calls), in order, and records every request it receives.

    model = ScriptedModel(call("weather", city="Paris"), "18 °C and sunny in Paris.")
    agent = app.agent("forecaster", model=model, tools=[weather])

    async def test_forecaster():
        async with runwright.testing.Env(app) as env:
            handle = await app.submit(agent, "Weather in Paris?")
            assert await env.result(handle) == "18 °C and sunny in Paris."
            assert [c.name for c in await env.tool_calls(handle)] == ["weather"]
            assert model.requests[1].tool_results == [("weather", "18 °C, sunny")]
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable, Sequence

from .agents.models import Model
from .app import App
from .client.handles import RunHandle
from .clock import OffsetClock
from .engine.worker import Worker
from .errors import ConfigError, FinalError
from .journal import Event
from .store.hub import QUEUED
from .store.params import RunNextDueParams, WorkerHeartbeatParams

__all__ = ["Call", "Env", "ModelRequest", "Reply", "ScriptExhausted", "ScriptedModel", "SkippingClock",
           "ToolCall", "call"]

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
        return [(step.name, None if step.result is None else json.loads(step.result))
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


# -- a scripted model -------------------------------------------------------------------


class ScriptExhausted(FinalError):
    """An agent asked a ScriptedModel for a reply beyond the end of its script. Final: the
    run fails at once, on its `model` step, with no retry."""


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call in a scripted reply (`call("weather", city="Paris")` makes one)."""

    name: str
    arguments: dict[str, Any]


def call(name: str, /, **arguments: Any) -> Call:
    """A tool call for a ScriptedModel's script: the tool's name and its arguments."""
    return Call(name, arguments)


Reply = str | Call | Sequence[Call]  # text, one tool call, or several in one reply


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request a ScriptedModel received: the conversation as the agent sent it and
    the tools it offered (chat-completions schemas)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered."""
        return [tool["function"]["name"] for tool in self.tools]

    @property
    def tool_results(self) -> list[tuple[str, str]]:
        """Every tool result in the conversation, in order: (the tool's name, the text)."""
        names = {asked["id"]: asked["function"]["name"] for message in self.messages
                 if message.get("role") == "assistant" for asked in message.get("tool_calls") or ()}
        return [(names.get(message.get("tool_call_id"), "?"), message.get("content") or "")
                for message in self.messages if message.get("role") == "tool"]


class ScriptedModel(Model):
    """A model that replies from a script, in order: a string is a final text reply, a
    `call(...)` a tool call, a list of them several tool calls in one reply. Give it to
    `app.agent(..., model=...)` as a real model is given (it is an `agents.models.Model`);
    in memory, deterministic, no network. Each request is kept in `requests`; a request
    beyond the script fails the run with ScriptExhausted. Every run of the agent draws
    from the one script, in the order the calls come; a replayed turn is not asked again
    (its reply is journaled). The tool calls of reply n have ids `call_<n>_<i>`."""

    def __init__(self, *replies: Reply, spec: str = "scripted:model") -> None:
        for number, scripted in enumerate(replies, 1):
            if not _is_reply(scripted):
                raise ConfigError(f"ScriptedModel: reply {number} of the script is {scripted!r}; "
                                  f"a reply is a string, a call(...) or a list of calls")
        self.spec = spec
        self.replies: list[Reply] = list(replies)
        self.requests: list[ModelRequest] = []

    def __repr__(self) -> str:
        return f"<ScriptedModel {self.spec} {len(self.requests)}/{len(self.replies)} replies given>"

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been asked for."""
        return max(0, len(self.replies) - len(self.requests))

    def prepare(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       on_tokens: Callable[[str], Awaitable[None]] | None = None,
                       on_retry: Callable[[int], Awaitable[None]] | None = None) -> dict[str, Any]:
        self.requests.append(ModelRequest(copy.deepcopy(messages), copy.deepcopy(tools)))
        number = len(self.requests)
        if number > len(self.replies):
            raise ScriptExhausted(
                f"{self.spec}: the agent asked for reply {number}, but the script has "
                f"{len(self.replies)}; its request ended with {_describe_last(messages)}")
        scripted = self.replies[number - 1]
        message: dict[str, Any] = {"role": "assistant"}
        if isinstance(scripted, str):
            message["content"] = scripted
            if on_tokens is not None and scripted:
                await on_tokens(scripted)
        else:
            calls = [scripted] if isinstance(scripted, Call) else list(scripted)
            message["tool_calls"] = [
                {"id": f"call_{number}_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in enumerate(calls)]
        return {"message": message, "usage": {"prompt_tokens": 0, "completion_tokens": 0},
                "cost_usd": 0.0, "priced": False, "model": self.spec}


def _is_reply(scripted: object) -> bool:
    if isinstance(scripted, (str, Call)):
        return True
    return (isinstance(scripted, (list, tuple)) and bool(scripted)
            and all(isinstance(c, Call) for c in scripted))


def _describe_last(messages: list[dict[str, Any]]) -> str:
    if not messages:
        return "no message"
    last = messages[-1]
    text = str(last.get("content") or "")
    shown = text if len(text) <= 80 else text[:77] + "..."
    return f"a {last.get('role', '?')} message {shown!r}"

