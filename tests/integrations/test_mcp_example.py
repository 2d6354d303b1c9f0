"""examples/mcp_agent.py works as the README says, against a scripted model, on SQLite."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, tool_results
from ..integration.conftest import running_worker


def stock_script(body: dict[str, Any], index: int) -> Reply:
    done = tool_results(body)
    if not done:
        return Reply(tool_calls=[call("lookup", {"sku": "A1"}, "look"),
                                 call("reserve", {"sku": "A1", "quantity": 2}, "res")])
    return Reply(content=f"{done['look']}; reserved {json.loads(done['res'])['reserved']}")


async def test_the_mcp_agent_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedOpenAI(stock_script) as server:
        monkeypatch.setenv("RUNWRIGHT_URL", f"sqlite:///{tmp_path / 'runwright.db'}")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        example = importlib.reload(importlib.import_module("examples.mcp_agent"))
        async with example.app as app, running_worker(app):
            run = await app.submit(example.stock, input="Is A1 in stock? Reserve 2.")
            assert await run.result(timeout_s=60) == "A1: 7 in stock; reserved 2"
    tools = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert tools == {"lookup", "reserve"}
