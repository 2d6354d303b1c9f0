"""Each function-tool call of an SDK agent as a journaled step, with its delivery.

The agent's `FunctionTool`s (its own, and those the SDK makes of its MCP servers' tools)
are copied with `on_invoke_tool` wrapped: the SDK's own invoker (argument parsing, the
tool's failure handler) runs inside `ctx.step("tool:<name>", ...)`, and its result is
journaled as JSON. A `needs_approval` tool asks a person through `ctx.ask_for` (the run
parks until the answer) instead of interrupting the SDK's run.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Callable, Mapping

from agents.tool import FunctionTool

from ...agents._loop import _approval
from ...agents._tools import DELIVERIES, Delivery
from ...errors import ConfigError, OutcomeUnknown
from .._delivery import delivery_from_annotations

if TYPE_CHECKING:
    from agents.tool_context import ToolContext

    from ._seam import RunSeam

__all__ = ["check_deliveries", "idempotency_key", "wrap_tool"]

_KEY: ContextVar[str | None] = ContextVar("runwright_openai_agents_idempotency_key", default=None)


def idempotency_key() -> str:
    """Inside an `idempotent` tool of a durable run: the call's stable key `run_id:position`,
    the same on every execution of the call (give it to the far side to deduplicate on)."""
    key = _KEY.get()
    if key is None:
        raise ConfigError("idempotency_key() is called from inside a tool whose delivery is "
                          "idempotent, in a durable run (runwright.integrations.openai_agents)")
    return key


def check_deliveries(tools: Mapping[str, str] | None) -> dict[str, Delivery]:
    """The user's deliveries by tool name, each checked."""
    out: dict[str, Delivery] = {}
    for name, delivery in (tools or {}).items():
        if delivery not in DELIVERIES:
            raise ConfigError(f"tool {name!r}: delivery must be one of {', '.join(DELIVERIES)}, "
                              f"got {delivery!r}")
        out[name] = delivery  # type: ignore[assignment]
    return out


def delivery_of(tool: FunctionTool, overrides: Mapping[str, Delivery]) -> Delivery:
    """The user's choice by name; else, for an MCP tool, what its annotations say; else
    at-least-once."""
    if tool.name in overrides:
        return overrides[tool.name]
    if tool._mcp_tool_binding is not None:
        return delivery_from_annotations(tool.mcp_annotations)
    return "at_least_once"


def wrap_tool(tool: FunctionTool, run: RunSeam) -> FunctionTool:
    """A copy of `tool` whose calls are journaled steps (see module doc)."""
    delivery = delivery_of(tool, run.deliveries)
    invoke: Callable[..., Any] = tool.on_invoke_tool
    needs_approval = tool.needs_approval
    name = tool.name

    async def on_invoke_tool(tool_context: ToolContext[Any], arguments: str) -> Any:
        ctx = run.ctx
        if needs_approval is not False and await _needs_approval(needs_approval, tool_context, arguments):
            refusal = await _approval(ctx, name, _parsed(arguments))
            if refusal is not None:
                await run.after_tool_call(tool_context, name, refusal)
                return refusal
        run.check_deadline()
        key = f"{ctx.run_id}:{ctx.next_position}"  # the position this step takes, on every replay

        async def call() -> Any:
            token = _KEY.set(key if delivery == "idempotent" else None)
            try:
                return _as_json(await invoke(tool_context, arguments))
            finally:
                _KEY.reset(token)

        try:
            output = await ctx.step(f"tool:{name}", call, at_most_once=delivery == "at_most_once")
        except OutcomeUnknown:
            output = json.dumps({"error": "ToolOutcomeUnknown",
                                 "message": f"the call to {name!r} was started but its outcome is "
                                            f"unknown (the worker stopped mid-call); it was not "
                                            f"repeated because the tool is at-most-once. Check "
                                            f"before calling it again."})
        await run.after_tool_call(tool_context, name, output)
        return output

    # needs_approval is ours now: the SDK's own would interrupt the run instead of parking it.
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool, needs_approval=False)


def mcp_meta_resolver(previous: Callable[..., Any] | None) -> Callable[..., Any]:
    """An MCP server's `tool_meta_resolver` that adds the idempotency key of the call being
    made (an idempotent MCP tool's key travels in the request's `_meta`), over the user's."""

    async def resolve(context: Any) -> dict[str, Any] | None:
        meta = previous(context) if previous is not None else None
        if inspect.isawaitable(meta):
            meta = await meta
        key = _KEY.get()
        if key is None:
            return meta
        return {**(meta or {}), "idempotency_key": key}

    resolve.__runwright_key__ = True  # type: ignore[attr-defined]
    return resolve


async def _needs_approval(policy: Any, tool_context: ToolContext[Any], arguments: str) -> bool:
    if isinstance(policy, bool):
        return policy
    answer = policy(tool_context, _parsed(arguments), tool_context.tool_call_id)
    return bool(await answer if inspect.isawaitable(answer) else answer)


def _parsed(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _as_json(value: Any) -> Any:
    """A tool's result as the journal keeps it: JSON as it is, a pydantic model (the SDK's
    ToolOutputText and kin) as its dump, anything else as the text the SDK would send."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
