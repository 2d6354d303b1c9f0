"""examples/pydantic_ai_support.py works as its docstring says, against a scripted model
and its real MCP server (stdio)."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, tool_results
from ..integration.conftest import running_worker
from .pydantic_ai_helpers import collect_stdio_leftovers


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def support_script(body: dict[str, Any], index: int) -> Reply:
    done = tool_results(body)
    if "look" not in done:
        return Reply(tool_calls=[call("lookup_order", {"order_id": "42"}, "look")])
    if "pay" not in done:
        return Reply(tool_calls=[call("refund", {"order_id": "42", "amount_usd": 30}, "pay")])
    return Reply(content=f"{json.loads(done['look'])['status']}; {done['pay']}")


async def test_the_pydantic_ai_support_example(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedOpenAI(support_script) as server:
        monkeypatch.setenv("RUNWRIGHT_URL", store_url)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        example = importlib.reload(importlib.import_module("examples.pydantic_ai_support"))
        async with example.app as app, running_worker(app):
            run = await app.submit(example.support, prompt="Where is order 42?", thread="ann")
            answer = await run.result(timeout_s=60)
            journal = [s.name for s in await app.store.step_list(run.id)]
            history = await app.thread_history("ann")
        await example.agent.model.client.close()
    collect_stdio_leftovers()
    assert answer == "lost in transit; refunded $30.00 on order 42"
    assert journal == ["thread:history", "model", "tool:lookup_order", "model", "tool:refund", "model"]
    assert server.requests[0]["messages"][0]["role"] == "system"
    assert [m["kind"] for m in history] == ["request", "response"] * 3
