"""Each model call of an SDK agent as a journaled step.

`DurableModel` stands in for the agent's own model (the SDK's chat-completions or Responses
model, or any other `agents.Model`). A call runs the real model inside `ctx.step("model",
...)` and journals the reply as JSON: its output items (the openai SDK's pydantic models,
dumped), its usage and its response id. A replay after a takeover rebuilds the same
`ModelResponse` from the journal without calling the model, so the SDK's runner, which
is code, not state, walks the same turns again up to where the run stood.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.usage import deserialize_usage, serialize_usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputItem,
    ResponseTextDeltaEvent,
)
from pydantic import TypeAdapter

from ...agents._loop import ModelCall
from ...errors import ConfigError
from .._durable import emit_model_event
from ._errors import AgentRunError

if TYPE_CHECKING:
    from agents.agent_output import AgentOutputSchemaBase
    from agents.handoffs import Handoff
    from agents.model_settings import ModelSettings
    from agents.tool import Tool
    from openai.types.responses.response_prompt_param import ResponsePromptParam

    from ._seam import RunSeam

__all__ = ["DurableModel", "no_runner_retries"]

_OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
# Streamed text reaches the run's `tokens` events in pieces of this size or age, not one
# event per token (as runwright's own agents stream).
FLUSH_CHARS, FLUSH_S = 200, 0.1


class DurableModel(Model):
    """The model of one agent of a durable run (see module doc)."""

    def __init__(self, inner: Model, agent_name: str, run: RunSeam) -> None:
        self.inner = inner
        self.agent_name = agent_name
        self.run = run
        # The name in `model` events and the price table: the SDK's OpenAI models keep it
        # in `.model`; any other model is named by its class.
        name = getattr(inner, "model", None)
        self.name = name if isinstance(name, str) else type(inner).__name__

    async def close(self) -> None:
        await self.inner.close()

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           model_settings: ModelSettings, tools: list[Tool],
                           output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
                           tracing: ModelTracing, *, previous_response_id: str | None,
                           conversation_id: str | None, prompt: ResponsePromptParam | None,
                           **more: Any) -> ModelResponse:
        ctx, run = self.run.ctx, self.run
        no_runner_retries(model_settings, AgentRunError)
        turn = await run.before_model_call(input)
        input = await run.steer(input)

        async def call() -> dict[str, Any]:
            began = time.monotonic()
            response = await ctx.interruptible(self.inner.get_response(
                system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                previous_response_id=previous_response_id, conversation_id=conversation_id,
                prompt=prompt, **more))
            record = {"output": [_dump(item) for item in response.output],
                      "usage": serialize_usage(response.usage), "response_id": response.response_id,
                      "request_id": response.request_id}
            return await self._accounted(turn, record, began)

        record = await ctx.step("model", call)
        response = ModelResponse(output=[_OUTPUT_ITEM.validate_python(item) for item in record["output"]],
                                 usage=deserialize_usage(record["usage"]),
                                 response_id=record["response_id"], request_id=record.get("request_id"))
        await run.after_model_call(self.agent_name, response.output, record["cost_usd"], handoffs)
        return response

    async def stream_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                              model_settings: ModelSettings, tools: list[Tool],
                              output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
                              tracing: ModelTracing, *, previous_response_id: str | None,
                              conversation_id: str | None, prompt: ResponsePromptParam | None,
                              **more: Any) -> AsyncIterator[TResponseStreamEvent]:
        """Streamed: the text goes to the run's `tokens` events as it comes (with a
        `tokens_reset` when a later owner makes the call again, as runwright's own agents
        do); the SDK's stream gets the call's completed response once it is journaled (on
        a replay, from the journal), which is all its runner reads of it."""
        ctx, run = self.run.ctx, self.run
        no_runner_retries(model_settings, AgentRunError)
        turn = await run.before_model_call(input)
        input = await run.steer(input)
        tokens = ModelCall(ctx, turn, ctx.next_position)  # the position the step takes

        async def call() -> dict[str, Any]:
            began = time.monotonic()
            await tokens.start()
            completed: list[Response] = []

            async def consume() -> None:
                pending, flushed_at = "", time.monotonic()
                async for event in self.inner.stream_response(
                        system_instructions, input, model_settings, tools, output_schema, handoffs,
                        tracing, previous_response_id=previous_response_id,
                        conversation_id=conversation_id, prompt=prompt, **more):
                    if isinstance(event, ResponseTextDeltaEvent) and event.delta:
                        pending += event.delta
                        if len(pending) >= FLUSH_CHARS or time.monotonic() - flushed_at >= FLUSH_S:
                            await tokens.tokens(pending)
                            pending, flushed_at = "", time.monotonic()
                    elif isinstance(event, ResponseCompletedEvent):
                        completed.append(event.response)
                if pending:
                    await tokens.tokens(pending)

            await ctx.interruptible(consume())
            if not completed:
                raise ConfigError(f"model {self.name!r} streamed no completed response")
            response = completed[-1]
            usage = response.usage
            record = {"response": response.model_dump(mode="json", exclude_unset=True),
                      "usage": {"input_tokens": usage.input_tokens if usage else 0,
                                "output_tokens": usage.output_tokens if usage else 0}}
            return await self._accounted(turn, record, began)

        record = await ctx.step("model", call)
        response = Response.model_validate(record["response"])
        await run.after_model_call(self.agent_name, response.output, record["cost_usd"], handoffs)
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)

    async def _accounted(self, turn: int, record: dict[str, Any], began: float) -> dict[str, Any]:
        """The record with its cost and latency, its `model` event emitted (inside the step:
        the event of this execution of the call)."""
        prompt = int(record["usage"].get("input_tokens") or 0)
        completion = int(record["usage"].get("output_tokens") or 0)
        cost, priced = self.run.spending.cost(self.name, prompt, completion)
        latency = round(time.monotonic() - began, 4)
        output = record["response"]["output"] if "response" in record else record["output"]
        calls = [item["name"] for item in output if item.get("type") == "function_call"]
        await emit_model_event(self.run.ctx, turn=turn, model=self.name, prompt_tokens=prompt,
                               completion_tokens=completion, cost_usd=cost, priced=priced,
                               latency_s=latency, tool_calls=calls)
        return {**record, "cost_usd": cost, "priced": priced, "latency_s": latency}


def _dump(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_unset=True) if hasattr(item, "model_dump") else item


def no_runner_retries(model_settings: ModelSettings, error: type[Exception] = ConfigError) -> None:
    """The SDK's runner-managed retries would make a failed call and its retry two journal
    positions, which a replay could not match; retries belong inside the one call. Found in
    a run (`run_durably` checks nothing before), the error is final: an AgentRunError."""
    retry = getattr(model_settings, "retry", None)
    if retry is not None and (retry.max_retries or 0) > 0:
        raise error("ModelSettings.retry is not supported on a durable run: set max_retries "
                          "on the model's OpenAI client (retried inside the one journaled call)")
