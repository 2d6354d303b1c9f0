"""RunwrightAgent: a Pydantic AI WrapperAgent whose runs inside a runwright task are durable."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT
from pydantic_core import to_jsonable_python

from ...agents._models import Price
from ...agents._steering import Delivered, delivered_into, for_model
from ...agents._tools import DELIVERIES, Delivery
from ...engine._context import Context, current_context
from ...errors import ConfigError
from .._durable import Spending, ThreadLog, prices_table
from ._capability import Durability, ThreadDurability
from ._session import Approval, Session, answer_dangling_calls, load_messages

if TYPE_CHECKING:
    from ...app import App
    from ...tasks._specs import TaskSpec

__all__ = ["RunwrightAgent"]


class RunwrightAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """Wrap `agent`: run inside a runwright task (`durable.run(...)`, `run_stream`, `iter`,
    or the task `register` makes), each model request and tool call is a journaled step.

    `name`: the agent's name in runwright (its task's, by default); the agent's own name
    when not given. `tools`: a delivery by tool name ("at_least_once", the default;
    "at_most_once"; "idempotent"), for the agent's tools and its MCP servers' (whose
    annotations decide when not named). `prices`: USD per million tokens by model name,
    over runwright's defaults. `max_turns`: model calls per run (the run's Budget may
    bound them further). `approval`: by tool name, True or a predicate over the call's
    arguments: such a call waits for a person's yes (runwright's approval question, as
    `@app.tool(approval=...)`), as does any tool declared `requires_approval=True`.

    Outside a runwright task the agent runs plainly: nothing is journaled (as Pydantic AI's
    own durable wrappers do outside a workflow), so the same object serves tests and
    scripts. Inside one, runs of agents follow one another (not `asyncio.gather`ed): each
    step takes the run's next journal position, which must be the same on a replay."""

    def __init__(self, wrapped: AbstractAgent[AgentDepsT, OutputDataT], *, name: str | None = None,
                 tools: Mapping[str, str] | None = None,
                 prices: Mapping[str, Price | tuple[float, float]] | None = None,
                 max_turns: int | None = None,
                 approval: Mapping[str, Approval] | None = None) -> None:
        super().__init__(wrapped)
        durable_name = name or wrapped.name
        if not durable_name:
            raise ConfigError("RunwrightAgent: name the agent (Agent(..., name=...) or "
                              "RunwrightAgent(agent, name=...)): the name is its task's")
        self.durable_name: str = durable_name
        self.deliveries: dict[str, Delivery] = {}
        for tool, delivery in (tools or {}).items():
            if delivery not in DELIVERIES:
                raise ConfigError(f"RunwrightAgent {self.durable_name!r}: tool {tool!r}: delivery must be "
                                  f"one of {', '.join(DELIVERIES)}, got {delivery!r}")
            self.deliveries[tool] = cast(Delivery, delivery)  # checked just above
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise ConfigError(f"RunwrightAgent {self.durable_name!r}: max_turns must be an integer >= 1")
        self.max_turns = max_turns
        self.approvals: dict[str, Approval] = {}
        for tool, rule in (approval or {}).items():
            if not isinstance(rule, bool) and not callable(rule):
                raise ConfigError(f"RunwrightAgent {self.durable_name!r}: approval of tool {tool!r} is "
                                  f"True, False or a predicate over the arguments, got {rule!r}")
            self.approvals[tool] = rule
        try:
            self.prices = prices_table(prices)
        except TypeError as exc:
            raise ConfigError(f"RunwrightAgent {self.durable_name!r}: a price is (input, output) USD "
                              f"per million tokens: {exc}") from None

    @asynccontextmanager
    async def iter(self, user_prompt: Any = None,
                   **options: Any) -> AsyncIterator[AgentRun[AgentDepsT, Any]]:
        """Pydantic AI's `iter` (which `run` and `run_stream` use), made durable in a task."""
        ctx = current_context()
        if ctx is None:
            async with super().iter(user_prompt, **options) as plain:
                yield plain
            return
        spending = Spending(ctx, self.prices, self.max_turns)
        session = Session(ctx, self.deliveries, spending, ThreadLog(ctx), self.approvals)
        stored = await session.thread.history()
        if delivered_into(stored, ctx.run_id):
            raise Delivered(f"run {ctx.run_id}: its prompt was taken in by the run before it")
        earlier = [m for m in for_model(stored)
                   if isinstance(m, dict) and m.get("kind") in ("request", "response")]
        # The thread's runs that ended mid-turn left calls unanswered: each gets a result.
        # The caller's own history is Pydantic AI's business (deferred tool results, say).
        given = options.pop("message_history", None) or ()
        history = [*answer_dangling_calls(load_messages(earlier)), *given]
        session.base = len(history)
        durability = Durability(session) if ctx.run.thread is None else ThreadDurability(session)
        options["capabilities"] = [*(options.get("capabilities") or ()), durability]
        # One tool call at a time: each takes the next journal position, the same on a replay.
        with self.wrapped.parallel_tool_call_execution_mode("sequential"):
            async with super().iter(user_prompt, message_history=history or None, **options) as run:
                yield run
        await session.sync(run.all_messages())

    def register(self, app: App, name: str | None = None, *,
                 deps: Callable[[Context], Any] | None = None, **task_options: Any) -> TaskSpec:
        """Register a task `name` (the agent's name by default) that runs the agent on its
        one argument, `prompt`, and returns the output (JSON: a structured output as its
        JSON form). `deps(ctx)` makes the run's dependencies. `task_options` are
        `app.task`'s (retries, timeout_s, queue, ...)."""
        agent = self

        async def agent_task(ctx: Context, prompt: str) -> Any:
            try:
                result = await agent.run(prompt, deps=cast(Any, deps(ctx) if deps is not None else None))
            except Delivered:  # steered into the run before it, which ended first
                await ctx.emit("delivered", {})
                return None
            return to_jsonable_python(result.output)

        task_name = name or self.durable_name
        agent_task.__name__ = agent_task.__qualname__ = task_name
        agent_task.__doc__ = f"Pydantic AI agent {self.durable_name!r}, durable."
        return app.task(name=task_name, **task_options)(agent_task)


