"""A durable run of an SDK agent: `run_durably(ctx, agent, input)` inside a task, and
`register(app, agent)`, a task whose body is that.

The user's agents are not changed: the run works on copies (the agent, each agent it can
hand off to, found as the run goes), whose model is a `DurableModel` and whose function
tools are journaled (see _model.py, _tools.py). So a plain `Runner.run(agent, ...)`
elsewhere in the same program stays plain, and the SDK's runner itself is not patched.

Tools run one at a time, in the order the model asked for them (the SDK's
`max_function_tool_concurrency=1`), as runwright's own agents run them: each takes the
next journal position, the same on every replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import TYPE_CHECKING, Any, Mapping

import openai
from agents import Agent, Runner
from agents._public_agent import set_public_agent
from agents.exceptions import (
    AgentsException,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    OutputGuardrailTripwireTriggered,
)
from agents.handoffs import Handoff
from agents.items import ItemHelpers
from agents.models.interface import Model
from agents.run_config import RunConfig, ToolExecutionConfig
from agents.tool import FunctionTool

from ...agents._models import Price, _describe
from ...agents._steering import STEERED_FROM, Delivered, absorbed, delivered_into, for_model, take_steers
from ...agents._tools import Delivery
from ...engine._context import Context
from ...engine._parking import Interrupted, Park
from ...errors import BudgetExceeded, ConfigError, RunwrightError
from .._durable import Spending, ThreadLog, check_deadline, prices_table
from ._errors import AgentRunError, GuardrailTripped
from ._model import DurableModel, no_runner_retries
from ._tools import check_deliveries, mcp_meta_resolver, wrap_tool

if TYPE_CHECKING:
    from agents.lifecycle import RunHooks
    from agents.result import RunResult, RunResultStreaming
    from agents.tool_context import ToolContext

    from ...app import App
    from ...tasks._specs import TaskSpec

__all__ = ["AGENT_ITEM", "DurableRun", "register", "run_durably"]

AGENT_ITEM = "agent_item"  # the event kind of a run's items (messages, tool calls, outputs, handoffs)
ITEM_TEXT_LIMIT = 4000  # characters of a message or a tool output an `agent_item` event carries
TOOLS_AT_ONCE = 1  # each tool call takes the next journal position in the model's order
INTERRUPTED = json.dumps({"error": "interrupted",
                          "message": "not run: a newer message interrupted this turn"})
SUPERSEDED = json.dumps({"error": "not run",
                         "message": "superseded by a newer message before it was made"})


def register(app: App, agent: Agent[Any], *, name: str | None = None,
             tools: Mapping[str, str] | None = None, stream: bool = False, max_turns: int = 10,
             run_config: RunConfig | None = None, context: Any = None, hooks: RunHooks[Any] | None = None,
             prices: Mapping[str, Price | tuple[float, float]] | None = None,
             **task_options: Any) -> TaskSpec:
    """Register `agent` as the task `name` (default: the agent's name) taking `input: str`
    and returning the run's final output (JSON: a pydantic output as its dump). Submit it
    like any task (`thread=`, `on_busy=`, `budget=`). `tools`: a delivery by tool name
    ("at_least_once", "at_most_once", "idempotent") over the defaults (at-least-once; an MCP
    tool's from its annotations). `stream`: run with `Runner.run_streamed`, the text going
    to the run's `tokens` events. The agents' MCP servers are connected for each run (one
    connection per worker, shared by its runs of them) and closed after."""
    if not isinstance(agent, Agent):
        raise ConfigError(f"register(app, agent): agent must be an agents.Agent, got {type(agent).__name__}")
    deliveries = check_deliveries(tools)
    table = prices_table(prices)
    if not isinstance(max_turns, int) or max_turns < 1:
        raise ConfigError(f"agent {agent.name!r}: max_turns must be an integer >= 1")
    for each in _agents_of(agent):  # a misconfiguration found now, not in a run
        no_runner_retries(each.model_settings)
    if run_config is not None and run_config.model_settings is not None:
        no_runner_retries(run_config.model_settings)
    servers = _mcp_servers_of(agent)

    async def agent_task(ctx: Context, input: str) -> Any:
        async with _connected(servers):
            try:
                result = await run_durably(ctx, agent, input, tools=deliveries, stream=stream,
                                           max_turns=max_turns, run_config=run_config, context=context,
                                           hooks=hooks, prices=table)
            except Delivered:
                await ctx.emit("delivered", {})
                return None
        output = result.final_output
        return output.model_dump(mode="json") if hasattr(output, "model_dump") else output

    task_name = name or agent.name
    agent_task.__name__ = agent_task.__qualname__ = task_name
    agent_task.__doc__ = f"OpenAI Agents SDK agent {agent.name!r}, durable."
    return app.task(name=task_name, **task_options)(agent_task)


async def run_durably(ctx: Context, agent: Agent[Any], input: str | list[Any], *,
                      tools: Mapping[str, str] | None = None, stream: bool = False, max_turns: int = 10,
                      run_config: RunConfig | None = None, context: Any = None,
                      hooks: RunHooks[Any] | None = None,
                      prices: Mapping[str, Price | tuple[float, float]] | None = None
                      ) -> RunResult | RunResultStreaming:
    """Run `agent` on `input` with the SDK's Runner inside this task, durably: every model
    call and every function-tool call a journaled step (see the module doc). Returns the
    SDK's result. Only inside a runwright task: outside one, `Runner.run` is the SDK's own."""
    if not isinstance(ctx, Context):
        raise ConfigError("run_durably(ctx, agent, input) runs inside a runwright task: pass the task's "
                          "ctx (outside a task, the SDK's own Runner.run runs the agent plainly)")
    run = DurableRun(ctx, run_config or RunConfig(), check_deliveries(tools), prices_table(prices), max_turns)
    entry = run.agent(agent)
    items = await run.start(input)
    options: dict[str, Any] = {"context": context, "hooks": hooks, "run_config": run.run_config,
                               # Ours counts first (BudgetExceeded); the SDK's stays out of its way.
                               "max_turns": max_turns + 1}
    try:
        if stream:
            streamed = Runner.run_streamed(entry, items, **options)
            async for _ in streamed.stream_events():
                pass  # its text went to `tokens` events, its items to `agent_item` events
            result: RunResult | RunResultStreaming = streamed
        else:
            result = await Runner.run(entry, items, **options)
    except BaseException as exc:
        replacement = await run.failed(exc)
        if replacement is exc:
            raise
        if _ours(exc) is replacement:  # ours, out of the SDK's wrapping: as it was raised
            raise replacement.with_traceback(replacement.__traceback__) from None
        raise replacement from exc
    await run.finish(result.to_input_list())
    return result


class DurableRun:
    """One run's state: its copies of the agents, its budget, its part of the thread."""

    def __init__(self, ctx: Context, run_config: RunConfig, deliveries: Mapping[str, Delivery],
                 prices: dict[str, Price], max_turns: int) -> None:
        self.ctx = ctx
        self.deliveries = deliveries
        self.spending = Spending(ctx, prices, max_turns)
        self.log = ThreadLog(ctx)
        self._user_config = run_config
        self.run_config = dataclasses.replace(
            run_config, model=None,
            tool_execution=ToolExecutionConfig(
                max_function_tool_concurrency=TOOLS_AT_ONCE,
                pre_approval_tool_input_guardrails=(run_config.tool_execution.pre_approval_tool_input_guardrails
                                                    if run_config.tool_execution else False)))
        self._copies: dict[int, Agent[Any]] = {}
        self._open: dict[str, str] = {}  # call id -> its item's type, of calls the thread holds unanswered
        self._handoffs: dict[str, str] = {}  # the last reply's handoff calls: call id -> target
        # Messages steered into this run: (the SDK's input length when it came, the message).
        # The SDK rebuilds each call's input from its own items, so they go in at that place
        # in every later call's input too.
        self._steered: list[tuple[int, dict[str, Any]]] = []

    # -- the agents ---------------------------------------------------------------------

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """This run's copy of `agent` (made once; handoffs to it reach the copy)."""
        copy = self._copies.get(id(agent))
        if copy is not None:
            return copy
        if not isinstance(agent, Agent):
            raise ConfigError(f"a durable run hands off to agents.Agent only, got {type(agent).__name__}")
        copy = agent.clone(model=DurableModel(self._model_of(agent), agent.name, self),
                           model_settings=agent.model_settings,
                           tools=[wrap_tool(t, self) if isinstance(t, FunctionTool) else t
                                  for t in agent.tools],
                           handoffs=[])
        set_public_agent(copy, agent)  # hooks and results name the user's agent
        self._copies[id(agent)] = copy
        copy.handoffs = [self._handoff(h) for h in agent.handoffs]
        if agent.mcp_servers:
            copy.get_mcp_tools = self._mcp_tools(copy)  # type: ignore[method-assign]
        return copy

    def _model_of(self, agent: Agent[Any]) -> Model:
        config = self._user_config
        if isinstance(config.model, Model):
            return config.model
        name = config.model if isinstance(config.model, str) else agent.model
        if isinstance(name, Model):
            return name
        return config.model_provider.get_model(name)

    def _handoff(self, handoff: Agent[Any] | Handoff[Any, Any]) -> Any:
        if not isinstance(handoff, Handoff):
            return self.agent(handoff)
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(context: Any, arguments: str) -> Any:
            return self.agent(await invoke(context, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def _mcp_tools(self, copy: Agent[Any]) -> Any:
        listed = Agent.get_mcp_tools
        for server in copy.mcp_servers:
            resolver = getattr(server, "tool_meta_resolver", None)
            if hasattr(server, "tool_meta_resolver") and not getattr(resolver, "__runwright_key__", False):
                server.tool_meta_resolver = mcp_meta_resolver(resolver)

        async def get_mcp_tools(run_context: Any) -> list[Any]:
            tools = await listed(copy, run_context)
            return [wrap_tool(t, self) if isinstance(t, FunctionTool) else t for t in tools]

        return get_mcp_tools

    # -- the thread and the items ---------------------------------------------------------

    async def start(self, input: str | list[Any]) -> list[Any]:
        """The run's input list: the thread's history (every call answered), then `input`,
        which goes to the thread."""
        new = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        history = await self.log.history()
        if delivered_into(history, self.ctx.run_id):
            raise Delivered(f"run {self.ctx.run_id}: its input was taken in by the run before it")
        history = answer_dangling_calls(for_model(history))
        await self._append(new)
        return history + new

    async def before_model_call(self, input: str | list[Any]) -> int:
        """The call's turn (BudgetExceeded past the budget). The outputs the SDK made since
        the last model call for calls the thread holds unanswered (a handoff's) go to the
        thread first; the rest of the input is the SDK's view of the conversation, not the
        thread's. A handoff's input filter may have taken its output out of the input: the
        handoff was made all the same, and its output is the SDK's transfer message."""
        turn = self.spending.next_turn()
        if isinstance(input, list):
            await self._append_outputs(input)
        for call_id, target in list(self._handoffs.items()):
            if call_id in self._open:
                await self._append([{"call_id": call_id, "output": json.dumps({"assistant": target}),
                                     "type": "function_call_output"}])
        self._handoffs.clear()
        return turn

    async def steer(self, input: str | list[Any]) -> str | list[Any]:
        """The call's input with the messages steered into this run (`on_busy="steer"`):
        those taken now (journaled; each to the thread, marked, and its follower run ended)
        at its end, where every call has its output, and the earlier ones at their places."""
        sdk_length = 1 if isinstance(input, str) else len(input)
        for steer in await take_steers(self.ctx):
            message = steer.message()
            await self._append([message])
            await absorbed(self.ctx, steer)
            self._steered.append((sdk_length, {k: v for k, v in message.items() if k != STEERED_FROM}))
        if not self._steered:
            return input
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        for inserted, (place, message) in enumerate(self._steered):
            items.insert(min(place + inserted, len(items)), message)
        return items

    async def after_model_call(self, agent: str, output: list[Any], cost_usd: float,
                               handoffs: list[Handoff[Any, Any]]) -> None:
        """The reply's items to the thread and to the run's `agent_item` events; then the
        budget's cost check (the call is journaled: a resume does not pay for it again)."""
        items = [_jsonable(item) for item in output]
        await self._append(items)
        targets = {h.tool_name: h.agent_name for h in handoffs}
        for item in items:
            if item.get("type") == "function_call" and item.get("name") in targets:
                self._handoffs[item["call_id"]] = targets[item["name"]]
            await self.ctx.emit(AGENT_ITEM, _item_event(agent, item, targets))
        self.spending.spend(cost_usd)

    async def after_tool_call(self, tool_context: ToolContext[Any], tool: str, output: Any) -> None:
        """The call's output to the thread as it is made (as the SDK will send it back to
        the model), and to the run's `agent_item` events."""
        call_id = tool_context.tool_call_id
        text = output if isinstance(output, str) else json.dumps(output)
        item: Any = {"call_id": call_id, "output": text, "type": "function_call_output"}
        if tool_context.tool_call is not None:
            item = ItemHelpers.tool_call_output_item(tool_context.tool_call, output)
        if call_id in self._open:
            await self._append([item])
        agent = getattr(getattr(tool_context, "agent", None), "name", None)
        await self.ctx.emit(AGENT_ITEM, {"item": "tool_output", "agent": agent, "tool": tool,
                                         "call_id": call_id, "output": text[:ITEM_TEXT_LIMIT]})

    def check_deadline(self) -> None:
        check_deadline(self.ctx)

    async def finish(self, items: list[Any]) -> None:
        """The outputs the thread does not hold yet (a tool's output that ended the run)."""
        await self._append_outputs(items)

    async def _append_outputs(self, items: list[Any]) -> None:
        for item in items:
            item = _jsonable(item)
            if _is_output(item) and item.get("call_id") in self._open:
                await self._append([item])

    async def failed(self, exc: BaseException) -> BaseException:
        """What the task raises for `exc`: runwright's own (a park, an interrupt, a lost
        lease, a budget) through whatever the SDK wrapped it in; the SDK's errors as final."""
        ours = _ours(exc)
        if isinstance(ours, Interrupted) and ours.mode == "interrupt" and self.log.thread is not None:
            await self._close_unanswered()
        if ours is not None:
            return ours
        if isinstance(exc, MaxTurnsExceeded):
            return BudgetExceeded(f"budget exceeded: {exc}")
        if isinstance(exc, (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered)):
            guardrail = exc.guardrail_result.guardrail
            return GuardrailTripped(f"{type(exc).__name__}: guardrail {guardrail.get_name()!r} tripped")
        if isinstance(exc, AgentsException):
            return AgentRunError(f"{type(exc).__name__}: {exc}")
        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.APIStatusError) and isinstance(status, int) and 400 <= status < 500 \
                and status not in (408, 409, 429):
            # The provider refused the request (as runwright's own models, a 4xx but a
            # timeout, a conflict or a rate limit): repeating it would be refused again.
            return AgentRunError(f"the model refused the request: {_describe(exc)}")
        return exc

    async def _close_unanswered(self) -> None:
        """Interrupted: the calls made have their outputs already, the others get an
        "interrupted" one, so the thread's history stays one a provider accepts."""
        for call_id, kind in list(self._open.items()):
            if kind == "function_call":
                await self._append([{"call_id": call_id, "output": INTERRUPTED,
                                     "type": "function_call_output"}])

    async def _append(self, items: list[Any]) -> None:
        for item in items:
            item = _jsonable(item)
            if _is_output(item):
                self._open.pop(item.get("call_id"), None)
            elif isinstance(item, dict) and item.get("call_id"):  # a call of any kind of tool
                self._open[item["call_id"]] = str(item.get("type"))
            if self.log.thread is not None:
                await self.log.add(item)


def _is_output(item: Any) -> bool:
    return isinstance(item, dict) and str(item.get("type", "")).endswith("_output")


def answer_dangling_calls(items: list[Any]) -> list[Any]:
    """The history with an output for every function call, as the SDK and the providers
    require: a run that ended while a call waited (an approval a newer message
    superseded) left it unanswered; it gets an output saying it was never made."""
    out: list[Any] = []
    open_calls: list[str] = []

    def close() -> None:
        out.extend({"call_id": call_id, "output": SUPERSEDED, "type": "function_call_output"}
                   for call_id in open_calls)
        open_calls.clear()

    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call_output":
            if item["call_id"] in open_calls:
                open_calls.remove(item["call_id"])
        elif kind not in ("function_call", "reasoning"):
            close()
        out.append(item)
        if kind == "function_call":
            open_calls.append(item["call_id"])
    close()
    return out


def _item_event(agent: str, item: Any, handoffs: dict[str, str]) -> dict[str, Any]:
    kind = item.get("type") if isinstance(item, dict) else None
    if kind == "function_call":
        name = item.get("name")
        if name in handoffs:
            return {"item": "handoff", "agent": agent, "to": handoffs[name], "call_id": item.get("call_id")}
        return {"item": "tool_called", "agent": agent, "tool": name, "call_id": item.get("call_id")}
    if kind == "message":
        text = "".join(part.get("text") or part.get("refusal") or "" for part in item.get("content") or ()
                       if isinstance(part, dict))
        return {"item": "message", "agent": agent, "text": text[:ITEM_TEXT_LIMIT]}
    return {"item": kind or "other", "agent": agent}


def _jsonable(item: Any) -> Any:
    if hasattr(item, "model_dump"):
        return item.model_dump(mode="json", exclude_unset=True)
    return json.loads(json.dumps(item, default=str))


def _ours(exc: BaseException) -> BaseException | None:
    """runwright's own exception in `exc`'s chain (the SDK wraps a tool's in its own)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (Park, Interrupted, RunwrightError)):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _agents_of(agent: Agent[Any]) -> list[Agent[Any]]:
    """`agent` and every agent it can hand off to (by Agent; a Handoff object's agent is
    known only when it is invoked)."""
    found: dict[int, Agent[Any]] = {}
    stack = [agent]
    while stack:
        current = stack.pop()
        if id(current) not in found:
            found[id(current)] = current
            stack.extend(h for h in current.handoffs if isinstance(h, Agent))
    return list(found.values())


def _mcp_servers_of(agent: Agent[Any]) -> list[Any]:
    """The MCP servers of those agents, each once."""
    found: dict[int, Any] = {}
    for each in _agents_of(agent):
        for server in each.mcp_servers:
            found.setdefault(id(server), server)
    return list(found.values())


class _Connection:
    """One MCP server's connection in this process, shared by the runs using it."""

    def __init__(self) -> None:
        self.users = 0
        self.lock = asyncio.Lock()


_CONNECTIONS: dict[int, _Connection] = {}


class _connected:  # noqa: N801 (used as `async with`)
    """Connect `servers` for a run; the last run using a server closes it."""

    def __init__(self, servers: list[Any]) -> None:
        self.servers = servers

        self._held: list[Any] = []

    async def __aenter__(self) -> None:
        try:
            for server in self.servers:
                connection = _CONNECTIONS.setdefault(id(server), _Connection())
                async with connection.lock:
                    if connection.users == 0:
                        await server.connect()
                    connection.users += 1
                self._held.append(server)
        except BaseException:
            await self.__aexit__()  # let go of those connected before the one that failed
            raise

    async def __aexit__(self, *exc: object) -> None:
        while self._held:
            server = self._held.pop()
            connection = _CONNECTIONS[id(server)]
            async with connection.lock:
                connection.users -= 1
                if connection.users == 0:
                    await server.cleanup()
