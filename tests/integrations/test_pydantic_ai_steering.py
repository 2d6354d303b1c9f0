"""Steering a Pydantic AI agent mid-run (`on_busy="steer"`), in one process, on SQLite:
the message reaches the next model request as a user prompt after the tool results, stays
in every later request, goes to the thread once (marked), and its own run ends unrun."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest
from pydantic_ai import Agent

import runwright as rw
from runwright.agents._steering import STEERED_FROM
from runwright.engine import _crashpoints
from runwright.integrations.pydantic_ai import RunwrightAgent

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
from ..agents.test_steering import assert_valid_history
from ..integration.conftest import running_worker
from .pydantic_ai_helpers import close_models, model_for, user_messages


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def app(store_url: str) -> AsyncIterator[rw.App]:
    app = rw.App(store_url)
    await app.open()
    yield app
    await close_models()
    await app.close()


def script(body: dict[str, Any], index: int) -> Reply:
    """"start" -> the gated tool; once steered, one more (quick) tool call, so the steered
    prompt must stay in a later request; then the user messages seen."""
    users = user_messages(body)
    if last_role(body) == "user" and users == ["start"]:
        return Reply(tool_calls=[call("wait_for_gate", {}, "c1")])
    if "also this" in users and "c2" not in tool_results(body):
        return Reply(tool_calls=[call("quick", {}, "c2")])
    return Reply(content=" | ".join(users))


def gated(app: rw.App, server: ScriptedOpenAI, **options: Any) -> tuple[Any, asyncio.Event, asyncio.Event]:
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = Agent(model_for(server), name="helper")

    @agent.tool_plain
    async def wait_for_gate() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "gate opened"

    @agent.tool_plain
    async def quick() -> str:
        """Answer at once."""
        return "quick"

    return RunwrightAgent(agent).register(app, **options), gate, entered


async def test_a_steer_reaches_the_next_model_requests_and_its_run_never_runs(app: rw.App) -> None:
    with ScriptedOpenAI(script) as server:
        task, gate, entered = gated(app, server)
        async with running_worker(app):
            first = await app.submit(task, prompt="start", thread="t")
            await asyncio.wait_for(entered.wait(), 30)
            follower = await app.submit(task, prompt="also this", thread="t", on_busy="steer")
            gate.set()
            assert await first.result(timeout_s=30) == "start | also this"
            ended = await follower.refresh()
    assert ended.state is rw.RunState.CANCELLED and ended.started_at is None
    assert ended.error_info()["message"] == f"delivered into run {first.id}"
    second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "user"]
    assert second[-1]["content"] == "also this"
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert third[3]["content"] == "also this", "kept at its place in a later request"
    for request in server.requests:
        assert_valid_history(request["messages"])
    history = await app.thread_history("t")
    marked = [m for m in history if STEERED_FROM in m]
    assert [m[STEERED_FROM] for m in marked] == [follower.id]
    assert marked[0]["parts"][0]["content"] == "also this"
    assert [e.kind for e in await app.events_page(follower.id)] == ["submitted", "cancelled"]
    assert "steered" in [e.kind for e in await app.events_page(first.id)]


async def test_the_next_run_reads_a_steered_thread_as_a_valid_history(app: rw.App) -> None:
    with ScriptedOpenAI(script) as server:
        task, gate, entered = gated(app, server)
        async with running_worker(app):
            first = await app.submit(task, prompt="start", thread="t")
            await asyncio.wait_for(entered.wait(), 30)
            await app.submit(task, prompt="also this", thread="t", on_busy="steer")
            gate.set()
            await first.result(timeout_s=30)
            after = await app.submit(task, prompt="and then", thread="t", on_busy="steer")
            assert await after.result(timeout_s=30) == "start | also this | and then"
    assert_valid_history(server.requests[-1]["messages"])


async def test_a_follower_taken_in_by_a_run_that_ended_first_adds_nothing(app: rw.App) -> None:
    with ScriptedOpenAI(script) as server:
        task, gate, entered = gated(app, server, retries=0)
        _crashpoints.arm("steer.after_absorb", "raise", times=1)
        try:
            async with running_worker(app):
                first = await app.submit(task, prompt="start", thread="t")
                await asyncio.wait_for(entered.wait(), 30)
                follower = await app.submit(task, prompt="also this", thread="t", on_busy="steer")
                gate.set()
                with pytest.raises(rw.RunFailed):
                    await first.result(timeout_s=30)
                assert await follower.result(timeout_s=30) is None
        finally:
            _crashpoints.disarm("steer.after_absorb")
    assert len(server.requests) == 1
    assert "delivered" in [e.kind for e in await app.events_page(follower.id)]
    history = await app.thread_history("t")
    assert [m[STEERED_FROM] for m in history if STEERED_FROM in m] == [follower.id]
