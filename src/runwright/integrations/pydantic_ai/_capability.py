"""The capability that makes one run of a Pydantic AI agent durable, through Pydantic AI's
own seams: `get_wrapper_model` (every model request goes through a wrapper whose request
is a step), `get_wrapper_toolset` (every tool call of the run's toolset, MCP servers'
included, goes through a wrapper whose call is a step), the node and request hooks (the
run's messages go onto its thread as they are made), and `handle_deferred_tool_calls`
(a tool that requires approval asks a person through `ctx.ask_for`, parking the run,
instead of ending it with DeferredToolRequests)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.toolsets import AbstractToolset

from ...agents._steering import STEERED_FROM, absorbed, take_steers
from .._durable import ask_approval
from ._model import RunwrightModel
from ._session import Session, dump_message
from ._toolset import RunwrightToolset

__all__ = ["Durability", "ThreadDurability"]


class Durability(AbstractCapability[Any]):
    """Added to each durable run of the agent (never to the agent itself, which stays
    usable plainly)."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def get_wrapper_model(self, model: Model) -> Model | None:
        return model if isinstance(model, RunwrightModel) else RunwrightModel(model, self.session)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return RunwrightToolset(toolset, self.session)

    async def handle_deferred_tool_calls(self, ctx: RunContext[Any], *,
                                         requests: DeferredToolRequests) -> DeferredToolResults | None:
        """Each call of a tool that requires approval waits for a person (the run parks);
        the answer is journaled, so a replay does not ask again."""
        if not requests.approvals:
            return None
        results = DeferredToolResults()
        for call in requests.approvals:
            refusal = await ask_approval(self.session.ctx, call.tool_name, call.args_as_dict())
            results.approvals[call.tool_call_id] = True if refusal is None else ToolDenied(refusal)
        return results


class ThreadDurability(Durability):
    """For a run on a thread: its messages go onto the thread as they are made. A separate
    class, because Pydantic AI runs a hook only where a capability overrides it, and a run
    without a thread needs none of these."""

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        await self.session.sync(ctx.messages)  # the request (a prompt, or the tool results)
        self.session.answered.clear()
        return await self._steered(ctx, request_context)

    async def _steered(self, ctx: RunContext[Any], request_context: Any) -> Any:
        """The messages steered into this run (`on_busy="steer"`), taken now (journaled),
        as user prompts after the request's tool results: into the run's history (so every
        later request has them too), the thread (marked with their follower run, which then
        ends unrun) and this request."""
        steers = await take_steers(self.session.ctx)
        if not steers:
            return request_context
        added = []
        for steer in steers:
            request = ModelRequest(parts=[UserPromptPart(steer.input)])
            ctx.messages.append(request)
            await self.session.thread.add({**dump_message(request), STEERED_FROM: steer.run_id})
            await absorbed(self.session.ctx, steer)
            added.append(request)
        return dataclasses.replace(request_context, messages=[*request_context.messages, *added])

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        await self.session.sync(ctx.messages)
        return result
