"""The model of a durable run: each request is a journaled step named "model".

The step's result is the ModelResponse in Pydantic AI's own JSON form (its
ModelMessagesTypeAdapter), with the call's usage and cost: a replay returns the same
response without calling the model. A streamed request is drained inside the step, its
text going to the run's event stream as `tokens` events (a `tokens_reset` first when a new
owner makes the call again), and the agent gets the completed response as a stream.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models._request_timeout import open_durable_unit_stream
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from ...agents._loop import ModelCall
from ...observe._spans import annotate
from .._durable import emit_model_event
from ._session import Session, dump_message, load_messages

__all__ = ["RunwrightModel"]

# Streamed text goes out in coalesced pieces, as runwright's own model client sends it.
FLUSH_CHARS, FLUSH_S = 200, 0.1


class RunwrightModel(WrapperModel):
    def __init__(self, model: Model, session: Session) -> None:
        super().__init__(model)
        self.session = session

    @property
    def spec(self) -> str:
        """`provider:model`, as runwright names models in its `model` events."""
        return f"{self.wrapped.system}:{self.wrapped.model_name}"

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        session = self.session
        turn = session.spending.next_turn()

        async def call() -> dict[str, Any]:
            began = time.monotonic()
            response = await session.ctx.interruptible(
                self.wrapped.request(messages, model_settings, model_request_parameters))
            return await self._recorded(response, turn, began)

        return self._replayed(await session.ctx.step("model", call))

    @asynccontextmanager
    async def request_stream(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                             model_request_parameters: ModelRequestParameters,
                             run_context: RunContext[Any] | None = None) -> AsyncGenerator[StreamedResponse]:
        session = self.session
        turn = session.spending.next_turn()
        tokens = ModelCall(session.ctx, turn, session.ctx.next_position)  # the position this step takes

        async def drain() -> ModelResponse:
            await tokens.start()
            async with open_durable_unit_stream(self.wrapped, messages, model_settings,
                                                model_request_parameters, run_context) as stream:
                pending, flushed_at = "", time.monotonic()
                async for event in stream:
                    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                        pending += event.part.content
                    elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                        pending += event.delta.content_delta
                    if pending and (len(pending) >= FLUSH_CHARS or time.monotonic() - flushed_at >= FLUSH_S):
                        await tokens.tokens(pending)
                        pending, flushed_at = "", time.monotonic()
                if pending:
                    await tokens.tokens(pending)
                return stream.get()

        async def call() -> dict[str, Any]:
            began = time.monotonic()
            response = await session.ctx.interruptible(drain())
            return await self._recorded(response, turn, began)

        response = self._replayed(await session.ctx.step("model", call))
        # Its events are made from the parts, so a consumer of the agent's stream (run_stream,
        # an event_stream_handler) sees the text, the first time as on a replay.
        yield CompletedStreamedResponse(response, model_request_parameters=model_request_parameters,
                                        replay_events=True)

    async def _recorded(self, response: ModelResponse, turn: int, began: float) -> dict[str, Any]:
        """What the step journals: the response, its usage and cost; the `model` event."""
        prompt, completion = response.usage.input_tokens, response.usage.output_tokens
        cost, priced = self.session.spending.cost(response.model_name or self.wrapped.model_name,
                                                  prompt, completion)
        latency = round(time.monotonic() - began, 4)
        calls = [call.tool_name for call in response.tool_calls]
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": self.spec,
            "gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": completion,
            "runwright.agent.turn": turn, "runwright.agent.tool_calls": len(calls)}
        annotate(None, **attributes)  # on this step's span: the model and the counts, never the messages
        await emit_model_event(self.session.ctx, turn=turn, model=self.spec, prompt_tokens=prompt,
                               completion_tokens=completion, cost_usd=cost, priced=priced,
                               latency_s=latency, tool_calls=calls)
        return {"response": dump_message(response), "cost_usd": cost}

    def _replayed(self, recorded: dict[str, Any]) -> ModelResponse:
        """The journaled response; its cost counts against the run's budget (on a replay
        too, so the sum is the same after a takeover)."""
        (response,) = load_messages([recorded["response"]])
        assert isinstance(response, ModelResponse)
        self.session.spending.spend(recorded["cost_usd"])
        return response
