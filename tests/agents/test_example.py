"""The example in examples/ works as the README says, against a scripted model."""

from __future__ import annotations

import importlib
import json

from ..integration.conftest import running_worker
from .scripted_openai import Reply, ScriptedOpenAI, call, tool_results


def support_script(body, index) -> Reply:
    done = tool_results(body)
    if "look" not in done:
        return Reply(tool_calls=[call("lookup_order", {"order_id": 42}, "look")])
    if "pay" not in done:
        return Reply(tool_calls=[call("refund", {"order_id": 42, "amount_usd": 30}, "pay"),
                                 call("send_email", {"to": "ann@example.com", "body": "refunded"}, "mail")])
    return Reply(content=f"{json.loads(done['look'])['status']}; {done['pay']}; {done['mail']}")


async def test_the_support_agent_example(store_url, monkeypatch):
    with ScriptedOpenAI(support_script) as server:
        monkeypatch.setenv("RUNWRIGHT_URL", store_url)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        example = importlib.reload(importlib.import_module("examples.support_agent"))
        async with example.app as app, running_worker(app):
            run = await app.submit(example.support, input="Where is order 42?", thread="ann")
            answer = await run.result(timeout_s=30)
    assert answer == (f"lost in transit; refunded $30.00 on order 42; "
                      f"sent to ann@example.com (key {run.id}:5)")  # journal position 5
    assert server.requests[0]["messages"][0]["role"] == "system"
