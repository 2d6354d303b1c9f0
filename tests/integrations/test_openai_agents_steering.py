"""Steering an OpenAI Agents SDK agent mid-run (`on_busy="steer"`), in one process, on
SQLite: the message reaches the SDK's next model call after the tool outputs, stays in
every later call's input at its place (the SDK rebuilds the input from its own items), goes
to the thread once, and its own run ends unrun."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from agents import Agent, function_tool

import runwright as rw
from runwright.agents._steering import STEERED_FROM
from runwright.engine import _crashpoints
from runwright.integrations.openai_agents import register

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
from ..agents.test_steering import assert_valid_history
from ..integration.conftest import running_worker
from .openai_agents_kit import chat_model, close_clients


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[rw.App]:
    app = rw.App(f"sqlite:///{tmp_path / 'runwright.db'}")
    await app.open()
    yield app
    await close_clients()
    await app.close()


def script(body: dict[str, Any], index: int) -> Reply:
    """"start" -> the gated tool; once steered, one more (quick) tool call, so the steered
    message must stay in a later call's input; then the user messages seen."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    if last_role(body) == "user" and users == ["start"]:
        return Reply(tool_calls=[call("wait_for_gate", {}, "c1")])
    if "also this" in users and "c2" not in tool_results(body):
        return Reply(tool_calls=[call("quick", {}, "c2")])
    return Reply(content=" | ".join(users))


def gated(app: rw.App, server: ScriptedOpenAI, **options: Any) -> tuple[asyncio.Event, asyncio.Event]:
    gate, entered = asyncio.Event(), asyncio.Event()

    @function_tool
    async def wait_for_gate() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "gate opened"

    @function_tool
    async def quick() -> str:
        """Answer at once."""
        return "quick"

    register(app, Agent(name="helper", model=chat_model(server), tools=[wait_for_gate, quick]), **options)
    return gate, entered


async def test_a_steer_reaches_the_sdk_agents_next_model_calls_and_its_run_never_runs(app):
    with ScriptedOpenAI(script) as server:
        gate, entered = gated(app, server)
        async with running_worker(app):
            first = await app.submit("helper", input="start", thread="t")
            await asyncio.wait_for(entered.wait(), 30)
            follower = await app.submit("helper", input="also this", thread="t", on_busy="steer")
            gate.set()
            assert await first.result(timeout_s=30) == "start | also this"
            ended = await follower.refresh()
    assert ended.state is rw.RunState.CANCELLED and ended.started_at is None
    assert ended.error_info()["message"] == f"delivered into run {first.id}"
    second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "user"]
    assert second[-1] == {"role": "user", "content": "also this"}
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert third[3] == {"role": "user", "content": "also this"}, "kept at its place in a later call"
    for request in server.requests:
        assert_valid_history(request["messages"])
    history = await app.thread_history("t")
    users = [m for m in history if m.get("role") == "user"]
    assert [m["content"] for m in users] == ["start", "also this"]
    assert users[1][STEERED_FROM] == follower.id
    assert [e.kind for e in await app.events_page(follower.id)] == ["submitted", "cancelled"]
    assert "steered" in [e.kind for e in await app.events_page(first.id)]


async def test_the_next_sdk_run_reads_a_steered_thread_as_a_valid_history(app):
    with ScriptedOpenAI(script) as server:
        gate, entered = gated(app, server)
        async with running_worker(app):
            first = await app.submit("helper", input="start", thread="t")
            await asyncio.wait_for(entered.wait(), 30)
            await app.submit("helper", input="also this", thread="t", on_busy="steer")
            gate.set()
            await first.result(timeout_s=30)
            after = await app.submit("helper", input="and then", thread="t", on_busy="steer")
            assert await after.result(timeout_s=30) == "start | also this | and then"
    assert_valid_history(server.requests[-1]["messages"])


async def test_an_sdk_follower_taken_in_by_a_run_that_ended_first_adds_nothing(app):
    with ScriptedOpenAI(script) as server:
        gate, entered = gated(app, server, retries=0)
        _crashpoints.arm("steer.after_absorb", "raise", times=1)
        try:
            async with running_worker(app):
                first = await app.submit("helper", input="start", thread="t")
                await asyncio.wait_for(entered.wait(), 30)
                follower = await app.submit("helper", input="also this", thread="t", on_busy="steer")
                gate.set()
                with pytest.raises(rw.RunFailed):
                    await first.result(timeout_s=30)
                assert await follower.result(timeout_s=30) is None
        finally:
            _crashpoints.disarm("steer.after_absorb")
    assert len(server.requests) == 1
    assert "delivered" in [e.kind for e in await app.events_page(follower.id)]
    history = await app.thread_history("t")
    assert [m["content"] for m in history if m.get("role") == "user"] == ["start", "also this"]
