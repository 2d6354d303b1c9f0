"""examples/openai_agents_triage.py works as its docstring says, on the embedded default
(SQLite), against the scripted model: the MCP tool, the handoff, the at-most-once refund."""

from __future__ import annotations

import importlib
from typing import Any

from runwright.store._params import EventListParams

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, tool_results
from ..integration.conftest import running_worker
from .openai_agents_kit import close_clients  # noqa: F401 (turns the SDK's trace export off)


def triage_script(body: dict[str, Any], index: int) -> Reply:
    done = tool_results(body)
    system = body["messages"][0]["content"]
    if system.startswith("Look the order up"):
        if "look" not in done:
            return Reply(tool_calls=[call("order_status", {"order_id": 42}, "look")])
        return Reply(tool_calls=[call("transfer_to_refunds", {}, "hand")])
    if "pay" not in done:
        return Reply(tool_calls=[call("refund", {"order_id": 42, "amount_usd": 30}, "pay")])
    (status,) = done["look"]  # the MCP tool's result: one text part
    return Reply(content=f"{status['text']}; {done['pay']}")


async def test_the_openai_agents_triage_example(tmp_path, monkeypatch):
    with ScriptedOpenAI(triage_script) as server:
        monkeypatch.setenv("RUNWRIGHT_URL", f"sqlite:///{tmp_path / 'runwright.db'}")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        example = importlib.reload(importlib.import_module("examples.openai_agents_triage"))
        async with example.app as app, running_worker(app):
            run = await app.submit(example.task, input="Order 42 never came.", thread="ann")
            answer = await run.result(timeout_s=60)
            events = await app.store.event_list(EventListParams(run.id))
            steps = [s.name for s in await app.store.step_list(run.id)]
    assert answer == "lost in transit, $30; refunded $30.00 on order 42"
    assert steps == ["thread:history", "model", "tool:order_status", "model", "model", "tool:refund", "model"]
    items = [e.data for e in events if e.kind == "agent_item"]
    assert {"item": "handoff", "agent": "triage", "to": "refunds", "call_id": "hand"} in items
    assert [e.data["turn"] for e in events if e.kind == "model"] == [1, 2, 3, 4]
