"""Agents on threads: history across runs and the four busy policies, on every backend."""

from __future__ import annotations

import asyncio
import json

import pytest

import runwright as rw

from ..integration.conftest import running_worker
from .scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
from .test_agents import model_at


def echo_history(body, index) -> Reply:
    """Answers with the user messages it was shown, so a test sees the history."""
    return Reply(content=" | ".join(m["content"] for m in body["messages"] if m["role"] == "user"))


async def test_a_thread_keeps_its_history_across_runs(app):
    with ScriptedOpenAI(echo_history) as server:
        app.agent("chat", model=model_at(server))
        async with running_worker(app):
            first = await app.submit("chat", input="my name is Ann", thread="t1")
            assert await first.result(timeout_s=30) == "my name is Ann"
            second = await app.submit("chat", input="what is my name?", thread="t1")
            assert await second.result(timeout_s=30) == "my name is Ann | what is my name?"
        history = await app.thread_history("t1")
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "my name is Ann"), ("assistant", "my name is Ann"),
        ("user", "what is my name?"), ("assistant", "my name is Ann | what is my name?")]


async def test_reject_and_enqueue(app):
    order: list[str] = []
    gate = asyncio.Event()

    @app.tool
    async def wait_for_gate(label: str) -> str:
        """Block until the test opens the gate."""
        order.append(f"start {label}")
        await gate.wait()
        order.append(f"end {label}")
        return label

    def script(body, index) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("wait_for_gate", {"label": body["messages"][-1]["content"]},
                                          f"c{index}")])
        return Reply(content="done")

    with ScriptedOpenAI(script) as server:
        app.agent("slow", model=model_at(server), tools=["wait_for_gate"])
        async with running_worker(app, concurrency=4):
            first = await app.submit("slow", input="one", thread="t")
            with pytest.raises(rw.ThreadBusy):
                await app.submit("slow", input="refused", thread="t", on_busy="reject")
            second = await app.submit("slow", input="two", thread="t", on_busy="enqueue")
            third = await app.submit("slow", input="three", thread="t", on_busy="enqueue")
            gate.set()
            for handle in (first, second, third):
                assert await handle.result(timeout_s=30) == "done"
    assert order == ["start one", "end one", "start two", "end two", "start three", "end three"]


@pytest.mark.parametrize("mode", ["interrupt", "rollback"])
async def test_interrupt_keeps_started_calls_closes_the_rest_and_the_new_run_goes_next(app, mode):
    entered, release = asyncio.Event(), asyncio.Event()
    made: list[str] = []

    @app.tool
    async def slow_lookup(what: str) -> str:
        """Look something up, slowly."""
        made.append(what)
        if what == "first":
            entered.set()
            await release.wait()
        return f"found {what}"

    def script(body, index) -> Reply:
        if last_role(body) == "user" and body["messages"][-1]["content"] == "start":
            return Reply(tool_calls=[call("slow_lookup", {"what": "first"}, "a"),
                                     call("slow_lookup", {"what": "second"}, "b")])
        return Reply(content=json.dumps(tool_results(body)))

    with ScriptedOpenAI(script) as server:
        app.agent("researcher", model=model_at(server), tools=["slow_lookup"])
        async with running_worker(app, concurrency=4, cancel_poll_s=0.05) as worker:
            old = await app.submit("researcher", input="start", thread="t")
            await asyncio.wait_for(entered.wait(), 30)
            new = await app.submit("researcher", input="stop, new question", thread="t", on_busy=mode)
            # The started call is still in flight; release it once its worker knows.
            await _until(lambda: worker.control_of(old.id).interrupt == mode)
            release.set()
            with pytest.raises(rw.RunFailed, match="ended interrupted"):
                await old.result(timeout_s=30)
            answer = json.loads(await new.result(timeout_s=30))
    assert made == ["first"]  # the started call finished; the unstarted one never ran
    last_request = server.requests[-1]["messages"]
    calls = [c["id"] for m in last_request if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m["tool_call_id"] for m in last_request if m["role"] == "tool"]
    if mode == "interrupt":
        assert calls == ["a", "b"] and sorted(results) == ["a", "b"]  # one result per call id
        assert answer["a"] == "found first"
        assert json.loads(answer["b"])["error"] == "interrupted"
        assert [m["role"] for m in last_request] == ["user", "assistant", "tool", "tool", "user"]
    else:
        assert calls == [] and results == [] and answer == {}  # the old run's additions are gone
        assert [m["content"] for m in last_request] == ["stop, new question"]


async def _until(predicate, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_delete_thread_cancels_waits_and_deletes(app):
    with ScriptedOpenAI(echo_history) as server:
        app.agent("chat", model=model_at(server))
        async with running_worker(app):
            done = await app.submit("chat", input="hello", thread="gone")
            await done.result(timeout_s=30)
        waiting = await app.submit("chat", input="never answered", thread="gone", on_busy="enqueue")
        await app.delete_thread("gone")
    assert (await waiting.refresh()).state is rw.RunState.CANCELLED
    with pytest.raises(rw.ThreadDeleted):
        await app.thread_history("gone")
    with pytest.raises(rw.ThreadDeleted):
        await app.submit("chat", input="again", thread="gone")
    with pytest.raises(rw.InvalidInput, match="on_busy"):
        await app.submit("chat", input="x", thread="t", on_busy="shout")
