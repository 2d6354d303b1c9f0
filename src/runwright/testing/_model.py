"""A scripted model for agents: replies from a script, in order, recording every request."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from ..agents._models import Model
from ..errors import ConfigError, FinalError

__all__ = ["Call", "ModelRequest", "Reply", "ScriptExhausted", "ScriptedModel", "call"]


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

