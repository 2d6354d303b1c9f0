"""One durable run of a Pydantic AI agent: what its wrappers share, its messages onto
the run's thread, and a history every provider accepts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolReturnPart,
)
from pydantic_ai.tools import RunContext

from ...agents._tools import Delivery
from .._durable import Spending, ThreadLog

if TYPE_CHECKING:
    from ...engine._context import Context

__all__ = ["Approval", "Session", "answer_dangling_calls", "dump_message", "load_messages"]

# Whether a call needs a person's yes: always, or as a predicate over its arguments says.
Approval = bool | Callable[[dict[str, Any]], bool]

INTERRUPTED = json.dumps({"error": "interrupted",
                          "message": "not run: a newer message interrupted this turn"})
NOT_RUN = json.dumps({"error": "not run", "message": "superseded by a newer message before it was made"})


def dump_message(message: ModelMessage) -> Any:
    """One message in Pydantic AI's own JSON form (what the thread keeps)."""
    return ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]


def load_messages(payload: list[Any]) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(payload)


@dataclass
class Session:
    """What the wrappers of one run share: the run's Context, its spending, its thread,
    the deliveries its user chose, and the results of the current turn's tool calls."""

    ctx: Context
    deliveries: dict[str, Delivery]
    spending: Spending
    thread: ThreadLog
    approvals: Mapping[str, Approval] = field(default_factory=dict)
    base: int = 0  # messages before this run's (the thread's and the caller's history)
    answered: dict[str, Any] = field(default_factory=dict)  # tool_call_id -> result, this turn

    async def sync(self, messages: list[ModelMessage]) -> None:
        """Append to the thread the run's messages not yet there. Each keeps its index,
        so a replay (the same messages, from journaled steps) appends nothing."""
        if self.thread.thread is None:
            return
        for message in messages[self.base + self.thread.added:]:
            await self.thread.add(dump_message(message))

    async def close_turn(self, ctx: RunContext[Any]) -> None:
        """An interrupt arrived between tool calls: the calls made keep their results, the
        others get an "interrupted" one, so that every call in the thread is answered."""
        await self.sync(ctx.messages)
        last = ctx.messages[-1] if ctx.messages else None
        if isinstance(last, ModelResponse) and last.tool_calls:
            parts = [ToolReturnPart(call.tool_name, self.answered.get(call.tool_call_id, INTERRUPTED),
                                    tool_call_id=call.tool_call_id) for call in last.tool_calls]
            await self.thread.add(dump_message(ModelRequest(parts=list(parts))))
        await self.ctx.stop_if_interrupted()


def answer_dangling_calls(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history with a result for every tool call, as providers require: a run that
    ended while a call waited (its approval superseded by a newer message, or the run
    interrupted mid-model-call after a turn's calls) left it unanswered; it gets a result
    saying it was never made."""
    out: list[ModelMessage] = []
    open_calls: dict[str, str] = {}  # tool_call_id -> tool name

    def close() -> None:
        if open_calls:
            out.append(ModelRequest(parts=[ToolReturnPart(name, NOT_RUN, tool_call_id=call_id)
                                           for call_id, name in open_calls.items()]))
            open_calls.clear()

    for message in messages:
        answers = [part.tool_call_id for part in getattr(message, "parts", ())
                   if isinstance(part, (ToolReturnPart, RetryPromptPart)) and part.tool_call_id in open_calls]
        if isinstance(message, ModelRequest) and answers:
            # The missing results go after the ones given (however many requests hold
            # them), before any other message.
            for call_id in answers:
                del open_calls[call_id]
            out.append(message)
            continue
        close()
        out.append(message)
        if isinstance(message, ModelResponse):
            open_calls.update((call.tool_call_id, call.tool_name) for call in message.tool_calls)
    close()
    return out
