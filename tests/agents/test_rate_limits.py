"""A model's rate limit, as the agent loop keeps it, and its settings."""

from __future__ import annotations

import asyncio
import time

import pytest

import runwright as rw

from ..integration.conftest import running_worker
from .scripted_openai import Reply, ScriptedOpenAI
from .test_agents import model_at


async def test_an_agents_model_calls_keep_the_models_rate_limit(app):
    def two_tools_then_answer(body, index) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < 2:
            return Reply(tool_calls=[{"id": f"c{done}", "name": "echo", "arguments": {"text": "hi"}}])
        return Reply(content="done")

    @app.tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    with ScriptedOpenAI(two_tools_then_answer) as server:
        model = model_at(server, "paced")
        app.rate_limit(model.spec, requests_per_min=60, burst_s=1)  # one a second, one at once
        app.agent("paced", model=model, tools=["echo"])
        async with running_worker(app):
            handle = await app.submit("paced", input="x")
            assert await handle.result(timeout_s=30) == "done"
    # The limit's promise: a call a second. (The first call's arrival is left out: it
    # may be late by the SDK's first connection.)
    _, second, third = server.received_at
    assert third - second >= 0.9


async def test_a_run_parked_by_its_models_rate_limit_is_listed_as_waiting_for_it(app):
    """The park is the agent loop's own (no injected reason): the second model call's turn
    is a minute away, so the run gives its slot back, and every list says why it waits."""
    def tool_then_answer(body, index) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[{"id": "c0", "name": "echo", "arguments": {"text": "hi"}}])
        return Reply(content="done")

    @app.tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    with ScriptedOpenAI(tool_then_answer) as server:
        model = model_at(server, "scarce")
        app.rate_limit(model.spec, requests_per_min=1)  # the second call: a minute after the first
        app.agent("scarce", model=model, tools=["echo"])
        async with running_worker(app):
            handle = await app.submit("scarce", input="x")
            async with asyncio.timeout(30):
                async for event in handle.events():
                    if event.kind == "parked":
                        break
                while (await handle.refresh()).state is not rw.RunState.QUEUED:
                    await asyncio.sleep(0.02)
            why = (await app.waiting([handle.run]))[handle.id]
            listed = {run.id for run in await app.list_runs(waiting="rate_limit")}
            await handle.cancel()
    assert why.reason is rw.WaitReason.RATE_LIMIT and why.until is not None
    assert why.until > time.time() + 30, why  # its turn, about a minute after the first call
    assert handle.id in listed


@pytest.mark.parametrize("options", [{}, {"requests_per_min": 0}, {"tokens_per_min": -5},
                                     {"requests_per_min": 10, "burst_s": 0}])
def test_a_rate_limit_without_a_positive_quota_is_refused(options, tmp_path):
    with pytest.raises(rw.ConfigError, match="requests_per_min and/or tokens_per_min > 0"):
        rw.App(f"sqlite:///{tmp_path / 'x.db'}").rate_limit("openai:x", **options)
