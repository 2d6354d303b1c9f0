"""What the OpenAI Agents SDK adapter's tests share: SDK agents whose model is the SDK's
chat-completions model pointed at a scripted OpenAI-protocol server on loopback
(tests/agents/scripted_openai.py), with the SDK's tracing export off (no network)."""

from __future__ import annotations

from typing import Any

from agents import OpenAIChatCompletionsModel, set_tracing_disabled
from openai import AsyncOpenAI

from ..agents.scripted_openai import ScriptedOpenAI

__all__ = ["chat_model", "close_clients", "tool_messages"]

set_tracing_disabled(True)
_CLIENTS: list[AsyncOpenAI] = []


def chat_model(server: ScriptedOpenAI, name: str = "gpt-4o-mini") -> OpenAIChatCompletionsModel:
    """The SDK's chat-completions model on the scripted server (no client retries: a test
    sees every request it makes)."""
    client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    _CLIENTS.append(client)
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


def tool_messages(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(tool_call_id, content) of each tool message of a request, in order."""
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def close_clients() -> None:
    """Close the clients the test's models opened (their connections are the loop's)."""
    while _CLIENTS:
        await _CLIENTS.pop().close()
