"""The toolset of a durable run: each tool call is a journaled step "tool:<name>", with
its delivery (runwright.agents._tools):

    at_least_once  (default) a call interrupted by a crash runs again
    at_most_once   a started call with no recorded result is never run again; the model
                   gets a ToolOutcomeUnknown result instead
    idempotent     at-least-once, and the call carries a stable key `run_id:position`:
                   `idempotency_key()` inside the tool, and `_meta.idempotency_key` of an
                   MCP server's call

An MCP server's tool gets its delivery from its annotations (delivery_from_annotations)
unless the user names it. What the step journals is Pydantic AI's own CallToolResult in
JSON, so a tool's ModelRetry, ToolFailed or validation error replays as itself.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic_ai.durable_exec import CallToolResult
from pydantic_ai.durable_exec._codec import JSON_CODEC
from pydantic_ai.durable_exec._toolset import unwrap_tool_call_result, wrap_tool_call_result
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ...agents._tools import Delivery
from ...errors import OutcomeUnknown
from ...observe._spans import annotate
from .._delivery import delivery_from_annotations
from .._durable import ask_approval, check_deadline, outcome_unknown
from ._session import Session

__all__ = ["RunwrightToolset", "idempotency_key"]

_KEY: ContextVar[str | None] = ContextVar("runwright_pydantic_ai_idempotency_key", default=None)


def idempotency_key() -> str:
    """Inside a call of an idempotent tool of a durable run: its stable key
    `run_id:position`, the same on every execution of that call (after a takeover too),
    for the far side to deduplicate on. Outside one, a RuntimeError."""
    key = _KEY.get()
    if key is None:
        raise RuntimeError("idempotency_key() is known only inside a call of a tool declared "
                           "idempotent, in a durable run (RunwrightAgent(..., tools={name: 'idempotent'}))")
    return key


def delivery_of(session: Session, name: str, tool: ToolsetTool[Any]) -> Delivery:
    """The user's choice by name; else an MCP tool's annotations; else at least once."""
    chosen = session.deliveries.get(name)
    metadata = tool.tool_def.metadata or {}
    if "annotations" in metadata and "meta" in metadata:  # an MCP server's tool (pydantic_ai.mcp)
        return delivery_from_annotations(metadata.get("annotations"), chosen)
    return chosen or "at_least_once"


def _is_mcp(tool: ToolsetTool[Any]) -> bool:
    """Whether the tool's own toolset is an MCP server's, whose call can carry `_meta`."""
    try:
        from pydantic_ai.mcp import MCPToolset
    except ImportError:  # the `mcp` extra of pydantic-ai is not installed: no MCP toolset either
        return False
    return isinstance(tool.toolset, MCPToolset)


@dataclass
class RunwrightToolset(WrapperToolset[Any]):
    """A dataclass, as its base: Pydantic AI copies wrappers with `dataclasses.replace`."""

    session: Session

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        session, run = self.session, self.session.ctx
        if run.interrupt_requested and not run.replaying:
            await session.close_turn(ctx)  # ends the run (Interrupted)
        check_deadline(run)
        rule = session.approvals.get(name, False)
        if rule(tool_args) if callable(rule) else rule:
            refusal = await ask_approval(run, name, tool_args)
            if refusal is not None:
                if ctx.tool_call_id is not None:
                    session.answered[ctx.tool_call_id] = refusal
                return refusal
        delivery = delivery_of(session, name, tool)
        key = f"{run.run_id}:{run.next_position}"  # the position this step takes: stable on replay

        async def call() -> Any:
            annotate(None, **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                              "runwright.tool.delivery": delivery})
            token = _KEY.set(key if delivery == "idempotent" else None)
            try:
                if delivery == "idempotent" and _is_mcp(tool):
                    made = tool.toolset.direct_call_tool(  # type: ignore[attr-defined]
                        name, tool_args, metadata={"idempotency_key": key})
                else:
                    made = self.wrapped.call_tool(name, tool_args, ctx, tool)
                return JSON_CODEC.dump(CallToolResult, await wrap_tool_call_result(made))
            finally:
                _KEY.reset(token)

        try:
            recorded = await run.step(f"tool:{name}", call, at_most_once=delivery == "at_most_once")
        except OutcomeUnknown:
            value: Any = outcome_unknown(name)
        else:
            value = unwrap_tool_call_result(JSON_CODEC.load(CallToolResult, recorded))
        if ctx.tool_call_id is not None:
            session.answered[ctx.tool_call_id] = value
        return value
