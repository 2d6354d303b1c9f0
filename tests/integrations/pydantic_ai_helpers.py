"""What the Pydantic AI adapter's tests share: a Pydantic AI OpenAI model pointed at the
scripted OpenAI-protocol server (tests/agents/scripted_openai.py), and model scripts."""

from __future__ import annotations

import gc
import json
import warnings
from typing import Any

from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from ..agents.scripted_openai import Reply, Script, ScriptedOpenAI, call, tool_results

__all__ = ["ask_tools_then_report", "close_models", "collect_stdio_leftovers", "model_for",
           "tool_calls_answered", "user_messages"]

_CLIENTS: list[Any] = []  # the clients model_for made: closed by close_models, in the test's loop


def model_for(server: ScriptedOpenAI | str, name: str = "gpt-4o-mini") -> OpenAIChatModel:
    """Pydantic AI's own OpenAI chat model, on the scripted server; no SDK retries (a test
    sees every request it makes)."""
    import openai

    base_url = server if isinstance(server, str) else server.base_url
    client = openai.AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)
    _CLIENTS.append(client)
    return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))


async def close_models() -> None:
    while _CLIENTS:
        await _CLIENTS.pop().close()


def collect_stdio_leftovers() -> None:
    """Collect, now, the asyncio subprocess transports an MCP stdio client leaves to the
    garbage collector (FastMCP's stdio transport ends its server process but does not close
    its asyncio transport): their ResourceWarning would otherwise surface in whichever
    later test the collector happens to run in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def ask_tools_then_report(*calls: tuple[str, dict[str, Any]]) -> Script:
    """The model asks for each tool in turn (one a turn), then answers with the tool
    results it was given (JSON, by call id c1, c2, ...)."""

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if len(results) < len(calls):
            name, arguments = calls[len(results)]
            return Reply(tool_calls=[call(name, arguments, f"c{len(results) + 1}")])
        return Reply(content=json.dumps(results))

    return script


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def tool_calls_answered(body: dict[str, Any]) -> bool:
    """Whether every tool call of an assistant message is answered by a tool message
    before the next non-tool message, as OpenAI's API requires of a history."""
    messages = body["messages"]
    for index, message in enumerate(messages):
        for tool_call in message.get("tool_calls") or ():
            following = []
            for later in messages[index + 1:]:
                if later["role"] != "tool":
                    break
                following.append(later["tool_call_id"])
            if tool_call["id"] not in following:
                return False
    return True
