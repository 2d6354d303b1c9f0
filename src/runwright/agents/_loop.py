"""The agent: a durable task that loops model call -> tool calls -> model call.

Every model call and every tool call is a journaled step, so a takeover resumes the
conversation where it stood: answered model calls are not paid for twice, completed tool
calls are not made twice, and an at-most-once tool interrupted mid-call is reported to
the model as a ToolOutcomeUnknown result rather than made again.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..core._payloads import load
from ..core._questions import APPROVAL_SCHEMA
from ..core._resilience import through_blinks
from ..errors import BudgetExceeded, ConfigError, LeaseLost, OutcomeUnknown, PayloadTooLarge
from ..observe._spans import annotate
from ..store._params import ThreadAppendParams, ThreadMessagesParams
from ..tasks._budget import Budget
from ._models import DEFAULT_PRICES, Model, ModelClient, Price
from ._rate_limits import within_quota
from ._steering import absorbed, delivered_into, for_model, take_steers
from ._tools import Toolset, ToolSpec, outcome_unknown_result

if TYPE_CHECKING:
    from ..engine._context import Context
    from ..tasks._registry import Registry
    from ..tasks._specs import TaskSpec

__all__ = ["AgentSpec", "define_agent", "run_agent"]


@dataclass
class AgentSpec:
    name: str
    model: Model
    tools: dict[str, ToolSpec]
    instructions: str = ""
    max_turns: int = 10
    stream: bool = False
    snapshot_every: int = 20  # turns between snapshots: a resume replays at most this many
    toolsets: list[Toolset] = field(default_factory=list)  # tools found at run time (MCP servers)
    schemas: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.schemas = [tool.schema() for tool in self.tools.values()]

    async def offer(self) -> list[dict[str, Any]]:
        """The toolsets' tool definitions now, each under its toolset's name (journaled with
        the model call that offered them)."""
        return [{"toolset": toolset.name, "tool": definition}
                for toolset in self.toolsets for definition in await toolset.definitions()]

    def tools_for(self, offered: Sequence[dict[str, Any]]) -> dict[str, ToolSpec]:
        """The tools a model call offered: the declared ones, then the toolsets' (a name
        already taken keeps its first tool)."""
        if not offered:
            return self.tools
        by_name = {toolset.name: toolset for toolset in self.toolsets}
        tools = dict(self.tools)
        for entry in offered:
            toolset = by_name.get(entry["toolset"])
            if toolset is not None and entry["tool"]["name"] not in tools:
                tools[entry["tool"]["name"]] = toolset.tool(entry["tool"])
        return tools


def define_agent(registry: Registry, name: str, *, model: str | Model,
                 tools: Sequence[ToolSpec | str | Toolset], instructions: str, max_turns: int, stream: bool,
                 prices: Mapping[str, Any] | None, snapshot_every: int = 20,
                 **task_options: Any) -> TaskSpec:
    """Register the agent `name` as a task of `registry`; its tools by spec or by name, or
    a Toolset's (an MCP server's: `runwright.integrations.mcp`).
    `model`: "provider:model" (a ModelClient with `prices`), or any Model."""
    table = dict(DEFAULT_PRICES)
    for model_name, price in (prices or {}).items():
        table[model_name] = price if isinstance(price, Price) else Price(*price)
    resolved: dict[str, ToolSpec] = {}
    toolsets: list[Toolset] = []
    for tool in tools:
        if isinstance(tool, Toolset):
            if any(other.name == tool.name for other in toolsets):
                raise ConfigError(f"agent {name!r}: two toolsets named {tool.name!r}; name one otherwise")
            toolsets.append(tool)
            continue
        spec = registry.tools.get(tool) if isinstance(tool, str) else tool
        if spec is None:
            raise ConfigError(f"agent {name!r}: unknown tool {tool!r}; register it with @app.tool")
        resolved[spec.name] = spec
    if max_turns < 1:
        raise ConfigError(f"agent {name!r}: max_turns must be >= 1")
    if not isinstance(snapshot_every, int) or snapshot_every < 1:
        raise ConfigError(f"agent {name!r}: snapshot_every must be an integer >= 1")
    client = ModelClient(model, table) if isinstance(model, str) else model
    agent = AgentSpec(name, client, resolved, instructions, max_turns, stream, snapshot_every, toolsets)

    async def agent_task(ctx: Context, input: str) -> str:
        return await run_agent(ctx, agent, input)

    agent_task.__name__ = agent_task.__qualname__ = name
    agent_task.__doc__ = f"Agent {name!r} on {client.spec}."
    task = registry.task(name=name, **task_options)(agent_task)
    registry.on_close(client.aclose)  # its HTTP connections belong to the loop that used them
    for toolset in toolsets:
        registry.on_close(toolset.aclose)
    return task


async def run_agent(ctx: Context, agent: AgentSpec, user_input: str) -> str:
    budget = Budget.from_json(ctx.run.budget)
    max_turns = min(agent.max_turns, budget.max_turns or math.inf)
    conversation = Conversation(ctx)
    # A resume starts from the last snapshot (every `snapshot_every` turns), so a run of
    # thousands of steps replays only the turns since.
    saved = await ctx.restore()
    if saved is None:
        if agent.instructions:
            conversation.messages.append({"role": "system", "content": agent.instructions})
        await conversation.load_history()
        if delivered_into(conversation.messages, ctx.run_id):
            # Steered into the run before this one, which ended before it could end this
            # one: the message is in the thread already; this run adds nothing.
            await ctx.emit("delivered", {})
            return ""
        await conversation.add({"role": "user", "content": user_input})
        spent_usd, turn = 0.0, 0
    else:
        conversation.resume(saved["messages"], saved["added"])
        spent_usd, turn = saved["spent_usd"], saved["turn"]
    while turn < max_turns:
        turn += 1
        _check_deadline(ctx)
        await _absorb_steers(ctx, conversation)
        model_call = ModelCall(ctx, turn, ctx.next_position)  # the position this step takes
        reply = await ctx.step("model", _call_model, model_call, agent, list(conversation.messages))
        spent_usd += reply["cost_usd"]
        message = reply["message"]
        await conversation.add(message)
        if budget.max_cost_usd is not None and spent_usd > budget.max_cost_usd:
            raise BudgetExceeded(f"budget exceeded: spent ${spent_usd:.6f} of "
                                 f"max_cost_usd=${budget.max_cost_usd} after {turn} model calls")
        calls = message.get("tool_calls") or []
        if not calls:
            return message.get("content") or ""
        tools = agent.tools_for(reply.get("offered", ()))  # those this model call was offered
        for index, call in enumerate(calls):
            if ctx.interrupt_requested and not ctx.replaying:
                await conversation.close_unanswered(calls[index:])
                await ctx.stop_if_interrupted()
            _check_deadline(ctx)
            content = await _call_tool(ctx, tools, call)
            await conversation.add({"role": "tool", "tool_call_id": call["id"], "content": content})
        if turn % agent.snapshot_every == 0:
            await _snapshot(ctx, conversation, spent_usd, turn)
    raise BudgetExceeded(f"budget exceeded: max_turns={int(max_turns)} model calls without a final answer")


async def _absorb_steers(ctx: Context, conversation: Conversation) -> None:
    """Before a model call, where every tool call has its result: the messages steered to
    this run (`on_busy="steer"`) join the conversation as user messages, in the order
    sent, and their runs end unrun (see _steering.py for why none is lost or doubled)."""
    for steer in await take_steers(ctx):
        await conversation.add(steer.message())
        await absorbed(ctx, steer)


async def _snapshot(ctx: Context, conversation: Conversation, spent_usd: float, turn: int) -> None:
    """All the loop needs to go on after this turn. A conversation too large for one
    payload is not snapshotted (the same on every replay): its resume replays further."""
    try:
        await ctx.snapshot({"messages": conversation.messages, "added": conversation.added,
                            "spent_usd": spent_usd, "turn": turn})
    except PayloadTooLarge:
        return


class Conversation:
    """The messages of this run, and of its thread's earlier runs when it has a thread.
    Each message is added to the thread as it is made (fenced, under its index in this
    run, so that a replayed add is a no-op): an interrupted run leaves a valid history."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.thread = ctx.run.thread
        self.messages: list[dict[str, Any]] = []
        self._added = 0

    @property
    def added(self) -> int:
        """How many messages this run has added to its thread (the next one's index)."""
        return self._added

    def resume(self, messages: list[dict[str, Any]], added: int) -> None:
        """Where a snapshot left the conversation."""
        self.messages = messages
        self._added = added

    async def load_history(self) -> None:
        if self.thread is not None:
            # Journaled: a replay sees the history this run started from.
            self.messages += await self.ctx.step("thread:history", _history, self.ctx, self.thread)

    async def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        if self.thread is None:
            return
        store, codecs = self.ctx.runtime.store, self.ctx.runtime.limits.codecs
        text = json.dumps(message)
        added = await through_blinks(store.thread_append, ThreadAppendParams(
            self.ctx.run_id, self.ctx.fence, self.thread, self._added,
            text if codecs is None else codecs.seal(text)))  # an agent's history: sealed as payloads are
        if not added:
            raise LeaseLost(self.ctx.run_id, self.ctx.fence)
        self._added += 1

    async def close_unanswered(self, calls: list[dict[str, Any]]) -> None:
        """Give every tool call not yet made a synthetic result, so that each call id in
        the history has exactly one result, as providers require."""
        content = json.dumps({"error": "interrupted",
                              "message": "not run: a newer message interrupted this turn"})
        for call in calls:
            await self.add({"role": "tool", "tool_call_id": call["id"], "content": content})


async def _history(ctx: Context, thread: str) -> list[dict[str, Any]]:
    """The thread's messages from the runs before this one (of this run's tenant)."""
    rows = await ctx.runtime.store.thread_messages(ThreadMessagesParams(
        thread, tenant=ctx.run.tenant, before_run=ctx.run_id))
    return _answer_dangling_calls([load(message) for _, _, message in rows])


def _answer_dangling_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with a result for every tool call, as providers require. A run that
    ended while a call waited (a newer message superseded its approval) left that call
    unanswered: it gets a result saying it was never made."""
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []

    def close() -> None:
        for call_id in open_calls:
            out.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(
                {"error": "not run", "message": "superseded by a newer message before it was made"})})
        open_calls.clear()

    for message in messages:
        if message.get("role") == "tool":
            if message.get("tool_call_id") in open_calls:
                open_calls.remove(message["tool_call_id"])
        else:
            close()
        out.append(message)
        if message.get("role") == "assistant":
            open_calls.extend(call["id"] for call in message.get("tool_calls") or ())
    close()
    return out


def _check_deadline(ctx: Context) -> None:
    deadline_at = ctx.run.deadline_at
    if deadline_at is not None and ctx.runtime.clock() > deadline_at:
        raise BudgetExceeded("budget exceeded: the run's deadline passed")


@dataclass
class ModelCall:
    """One model call's `tokens` events. Each carries the call (its journal position), the
    claim's fence and the HTTP attempt; a `tokens_reset` event says that the call's text
    streamed so far is void (an attempt failed mid-stream, or a new owner runs the call
    again after a takeover), so a follower that drops the call's text at each reset shows
    exactly the final message (`rw.TokenText` folds this)."""

    ctx: Context
    turn: int
    position: int
    attempt: int = 1
    streamed: bool = False

    async def start(self) -> None:
        # A call made again under a later claim may follow tokens of an earlier owner
        # that died mid-stream; reset unconditionally (a reset before any text is a no-op).
        if self.ctx.fence > 1:
            await self._reset()

    async def tokens(self, text: str) -> None:
        self.streamed = True
        await self.ctx.emit("tokens", {"turn": self.turn, "call": self.position, "fence": self.ctx.fence,
                                       "attempt": self.attempt, "text": text})

    async def retrying(self, failed_attempt: int) -> None:
        self.attempt = failed_attempt + 1
        if self.streamed:
            await self._reset()

    async def _reset(self) -> None:
        self.streamed = False
        await self.ctx.emit("tokens_reset", {"turn": self.turn, "call": self.position,
                                             "fence": self.ctx.fence, "attempt": self.attempt})


async def _call_model(call: ModelCall, agent: AgentSpec, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One model call (runs only when not journaled): its usage and cost become an event."""
    ctx, turn = call.ctx, call.turn
    messages = for_model(messages)  # a steered message without its mark
    began: list[float] = []  # when the call went out (after any wait for the model's quota)

    schemas, offered = agent.schemas, []
    if agent.toolsets:  # found now (each worker lists a server once), journaled with the reply
        offered = await agent.offer()
        schemas = [tool.schema() for tool in agent.tools_for(offered).values()]

    async def complete() -> dict[str, Any]:
        began.append(time.monotonic())
        if not agent.stream:
            return await agent.model.complete(messages, schemas)
        await call.start()
        return await agent.model.complete(messages, schemas, call.tokens, call.retrying)

    runtime, spec = ctx.runtime, agent.model.spec
    agent.model.prepare()
    # A newer message on the thread cuts the call (or its wait for the model's quota): no
    # partial reply is kept (the step is not journaled), and the next run need not wait.
    reply = await ctx.interruptible(within_quota(
        runtime.store, runtime.clock, spec, runtime.registry.rate_limits.get(spec), messages,
        schemas, complete))
    # The call's latency, its retries included: journaled with the reply (a run's page
    # shows it beside the tokens and the cost, after any takeover).
    reply = {**reply, "latency_s": round(time.monotonic() - began[-1], 4) if began else None}
    if offered:
        reply["offered"] = offered
    usage = reply["usage"]
    annotate(None, **{  # on this step's span: the model and the counts, never the messages
        "gen_ai.operation.name": "chat", "gen_ai.request.model": reply["model"],
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
        "runwright.agent.turn": turn,
        "runwright.agent.tool_calls": len(reply["message"].get("tool_calls") or ())})
    await ctx.emit("model", {"turn": turn, "model": reply["model"], "usage": reply["usage"],
                             "cost_usd": reply["cost_usd"], "priced": reply["priced"],
                             "latency_s": reply["latency_s"],
                             "tool_calls": [c["function"]["name"]
                                            for c in reply["message"].get("tool_calls") or ()]})
    return reply


async def _call_tool(ctx: Context, tools: dict[str, ToolSpec], call: dict[str, Any]) -> str:
    """One tool call as a journaled step; what the model gets back is always a string:
    the tool's result, or an error it can read and act on. `tools`: those the model was offered."""
    name = call["function"]["name"]
    step = f"tool:{name}"
    tool = tools.get(name)
    if tool is None:
        return str(await ctx.step(step, _error, f"unknown tool {name!r}; available: {sorted(tools)}"))
    try:
        arguments = tool.validate(call["function"].get("arguments") or "{}")
    except ValueError as exc:
        return str(await ctx.step(step, _error, str(exc)))
    if tool.needs_approval(arguments):
        refusal = await _approval(ctx, name, arguments)
        if refusal is not None:
            return refusal
    key = f"{ctx.run_id}:{ctx.next_position}"  # the position is the same on every replay

    async def invoke() -> str:
        annotate(None, **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                          "runwright.tool.delivery": tool.delivery})
        try:
            return _as_text(await tool.invoke(arguments, key))
        except Exception as exc:
            return _error(f"{type(exc).__name__}: {exc}")

    try:
        return str(await ctx.step(step, invoke, at_most_once=tool.delivery == "at_most_once"))
    except OutcomeUnknown:
        return outcome_unknown_result(name)


async def ask_approval(ctx: Context, name: str, arguments: Any) -> str | None:
    """Ask a person whether this call of tool `name` may be made (a question of kind
    `approval`; the run parks until it is answered; the answer is journaled under step
    `approve:<name>`). None when approved; else why not, naming who refused. The
    framework adapters (runwright.integrations) ask the same way."""
    body = {"text": f"Allow a call of tool {name!r}?", "schema": APPROVAL_SCHEMA, "tool": name,
            "arguments": json.loads(json.dumps(arguments, default=str))}
    answer = await ctx.ask_for("approval", f"approve:{name}", body)
    decision = answer["value"]
    if decision.get("approved"):
        return None
    return f"denied by {answer['by']}: {decision.get('reason') or 'no reason given'}"


async def _approval(ctx: Context, name: str, arguments: dict[str, Any]) -> str | None:
    """`ask_approval`, its refusal as the tool result the model gets, so the history stays
    valid (every call id has its one result)."""
    refusal = await ask_approval(ctx, name, arguments)
    return None if refusal is None else json.dumps({"error": "denied", "message": refusal})


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _error(message: str) -> str:
    return json.dumps({"error": message})
