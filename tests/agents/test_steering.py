"""Steering a running agent (`on_busy="steer"`), in-process, on every backend and memory://.

A message steered to a thread whose agent is mid-run reaches that agent's next model
call as a user message after the tool results, goes to the thread in its order, and its
own run ends unrun ("delivered into run N"); when there is no running agent to take it,
it runs as the thread's next run, as `enqueue` would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import runwright as rw
from runwright.agents._steering import STEER_SIGNAL, STEERED_FROM
from runwright.engine import _crashpoints
from runwright.testing import replay

from ..integration.conftest import running_worker
from ..process.harness import wait_until
from .scripted_openai import Reply, ScriptedOpenAI, call, last_role
from .test_agents import model_at


@pytest.fixture(params=["sqlite", "memory", "postgres", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def assert_valid_history(messages: list[dict[str, Any]]) -> None:
    """What a provider requires of a chat history: every tool call answered once, by
    results that come right after their assistant message, and no unknown keys."""
    open_calls: list[str] = []
    for message in messages:
        assert STEERED_FROM not in message, "the thread's mark never reaches the provider"
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, f"a result for no open call: {message}"
            open_calls.remove(message["tool_call_id"])
            continue
        assert not open_calls, f"calls {open_calls} unanswered before a {message['role']} message"
        if message["role"] == "assistant":
            open_calls = [c["id"] for c in message.get("tool_calls") or ()]
    assert not open_calls


def gated_script(body: dict[str, Any], index: int) -> Reply:
    """The first message asks for the gated tool; then the model answers with the user
    messages it was shown since the tool's result."""
    messages = body["messages"]
    if last_role(body) == "user" and messages[-1]["content"] == "start":
        return Reply(tool_calls=[call("wait_for_gate", {}, "c1")])
    users = [m["content"] for m in messages if m["role"] == "user"]
    return Reply(content=" | ".join(users))


def gated_agent(app: rw.App, server: ScriptedOpenAI, **options: Any) -> asyncio.Event:
    """An agent whose tool blocks until the returned gate opens (and says it entered)."""
    gate, entered = asyncio.Event(), asyncio.Event()

    @app.tool
    async def wait_for_gate() -> str:
        """Wait for the test."""
        entered.set()
        await gate.wait()
        return "gate opened"

    app.agent("helper", model=model_at(server), tools=["wait_for_gate"], **options)
    gate.entered = entered  # type: ignore[attr-defined]
    return gate


async def test_a_steer_reaches_the_next_model_call_and_its_run_never_runs(app):
    with ScriptedOpenAI(gated_script) as server:
        gate = gated_agent(app, server)
        async with running_worker(app):
            first = await app.submit("helper", input="start", thread="t")
            await asyncio.wait_for(gate.entered.wait(), 30)  # type: ignore[attr-defined]
            follower = await app.submit("helper", input="also this", thread="t", on_busy="steer")
            assert (await follower.refresh()).state is rw.RunState.QUEUED  # behind the running one
            [signal] = await app.signals(first.id)
            assert signal.name == STEER_SIGNAL
            assert signal.payload == {"run": follower.id, "input": "also this"}
            gate.set()
            assert await first.result(timeout_s=30) == "start | also this"
            ended = await follower.refresh()
    assert ended.state is rw.RunState.CANCELLED
    assert ended.error_info()["message"] == f"delivered into run {first.id}"
    assert ended.started_at is None and ended.attempt == 0, "the follower never ran"
    assert len(server.requests) == 2
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "user"]
    assert second[-1] == {"role": "user", "content": "also this"}  # after the tool's result
    assert_valid_history(second)
    history = await app.thread_history("t")
    assert [(m["role"], m.get("content")) for m in history] == [
        ("user", "start"), ("assistant", None), ("tool", "gate opened"), ("user", "also this"),
        ("assistant", "start | also this")]
    assert history[3][STEERED_FROM] == follower.id
    kinds = [(e.kind, e.data) for e in await app.events_page(first.id)]
    assert ("steered", {"from_run": follower.id}) in kinds
    assert [e.kind for e in await app.events_page(follower.id)] == ["submitted", "cancelled"]
    assert (await app.signals(first.id))[0].position is not None  # taken
    # Replay before you ship: the journal with its take replays on this code, cleanly.
    (outcome,) = await replay(app, task="helper")
    assert outcome.run_id == first.id and outcome.ok, outcome.detail


async def test_a_steer_whose_run_was_cancelled_is_withdrawn(app):
    with ScriptedOpenAI(gated_script) as server:
        gate = gated_agent(app, server)
        async with running_worker(app):
            first = await app.submit("helper", input="start", thread="t")
            await asyncio.wait_for(gate.entered.wait(), 30)  # type: ignore[attr-defined]
            follower = await app.submit("helper", input="never mind", thread="t", on_busy="steer")
            await follower.cancel()
            gate.set()
            assert await first.result(timeout_s=30) == "start"
    assert (await app.signals(first.id))[0].position is not None, "taken, and not delivered"
    history = await app.thread_history("t")
    assert [m.get("content") for m in history if m["role"] == "user"] == ["start"]
    assert "steered" not in [e.kind for e in await app.events_page(first.id)]


async def test_steers_sent_together_are_taken_in_the_order_sent(app):
    with ScriptedOpenAI(gated_script) as server:
        gate = gated_agent(app, server)
        async with running_worker(app):
            first = await app.submit("helper", input="start", thread="t")
            await asyncio.wait_for(gate.entered.wait(), 30)  # type: ignore[attr-defined]
            followers = [await app.submit("helper", input=text, thread="t", on_busy="steer")
                         for text in ("two", "three")]
            gate.set()
            assert await first.result(timeout_s=30) == "start | two | three"
    for follower in followers:
        assert (await follower.refresh()).state is rw.RunState.CANCELLED
    assert [m["content"] for m in server.requests[1]["messages"][-2:]] == ["two", "three"]


async def test_a_steer_after_the_agent_ended_runs_as_the_next_run(app):
    with ScriptedOpenAI(gated_script) as server:
        gated_agent(app, server)
        async with running_worker(app):
            first = await app.submit("helper", input="hello", thread="t")
            assert await first.result(timeout_s=30) == "hello"
            after = await app.submit("helper", input="again", thread="t", on_busy="steer")
            assert await after.result(timeout_s=30) == "hello | again"
            alone = await app.submit("helper", input="first words", thread="new", on_busy="steer")
            assert await alone.result(timeout_s=30) == "first words"  # no open run: it just runs
    assert await app.signals(first.id) == []


async def test_a_steer_behind_a_waiting_run_is_an_enqueue(app):
    """No worker yet: the thread's open run has not started, so the steer waits its turn."""
    with ScriptedOpenAI(gated_script) as server:
        gated_agent(app, server)
        first = await app.submit("helper", input="one", thread="t")
        second = await app.submit("helper", input="two", thread="t", on_busy="steer")
        assert await app.signals(first.id) == []
        async with running_worker(app):
            assert await first.result(timeout_s=30) == "one"
            assert await second.result(timeout_s=30) == "one | two"


async def test_a_steer_to_a_thread_whose_run_is_another_task_is_an_enqueue(app):
    release = asyncio.Event()

    @app.task()
    async def busy(ctx: rw.Context, input: str) -> str:
        await release.wait()
        return input

    with ScriptedOpenAI(gated_script) as server:
        gated_agent(app, server)
        async with running_worker(app):
            first = await app.submit(busy, input="x", thread="t")
            await _until(lambda: _state(app, first.id), rw.RunState.RUNNING)
            steered = await app.submit("helper", input="hi", thread="t", on_busy="steer")
            assert await app.signals(first.id) == []
            release.set()
            assert await steered.result(timeout_s=30) == "hi"


async def test_a_steer_to_an_agent_waiting_on_an_approval_is_the_persons_word(app):
    """As for every policy: the waiting run ends `interrupted`, its call answered "not
    run", and the steered message runs next."""
    @app.tool(approval=True)
    def transfer(amount: int) -> str:
        """Send money."""
        return "sent"

    def script(body: dict[str, Any], index: int) -> Reply:
        if body["messages"][-1]["content"] == "pay":
            return Reply(tool_calls=[call("transfer", {"amount": 5}, "t1")])
        return Reply(content="understood")

    with ScriptedOpenAI(script) as server:
        app.agent("banker", model=model_at(server), tools=[transfer])
        async with running_worker(app):
            first = await app.submit("banker", input="pay", thread="t")
            await wait_until(lambda: app.questions(), "the transfer waits for approval")
            await _until(lambda: _state(app, first.id), rw.RunState.QUEUED)  # parked on it
            steered = await app.submit("banker", input="no, stop", thread="t", on_busy="steer")
            assert await steered.result(timeout_s=30) == "understood"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    assert_valid_history(server.requests[-1]["messages"])


async def test_a_follower_whose_message_was_taken_in_ends_at_once_when_the_agent_ended_first(app):
    """The agent put the message in the thread and failed before ending its follower
    (`steer.after_absorb` raises, no retries): the follower, given its turn, finds its
    mark in the history and ends adding nothing: the message is in the thread once."""
    with ScriptedOpenAI(gated_script) as server:
        gate = gated_agent(app, server, retries=0)
        _crashpoints.arm("steer.after_absorb", "raise", times=1)
        try:
            async with running_worker(app):
                first = await app.submit("helper", input="start", thread="t")
                await asyncio.wait_for(gate.entered.wait(), 30)  # type: ignore[attr-defined]
                follower = await app.submit("helper", input="also this", thread="t", on_busy="steer")
                gate.set()
                with pytest.raises(rw.RunFailed):
                    await first.result(timeout_s=30)
                assert await follower.result(timeout_s=30) == ""
        finally:
            _crashpoints.disarm("steer.after_absorb")
    assert len(server.requests) == 1, "neither the failed run nor the follower called the model again"
    # A dry replay of the failed run takes the steer from its journal and writes nothing:
    # it ends cleanly where the journal does, at the model call that comes next.
    (outcome,) = [o for o in await replay(app, task="helper") if o.run_id == first.id]
    assert outcome.ok and "'model'" in outcome.detail, outcome.detail
    assert [e.kind for e in await app.events_page(follower.id)][-2:] == ["delivered", "succeeded"]
    history = await app.thread_history("t")
    assert [m.get("content") for m in history if m["role"] == "user"] == ["start", "also this"]


async def test_a_take_whose_run_ended_before_journaling_it_leaves_the_message_to_its_run(app):
    """`signal.after_take` raises with no retries: the agent's run fails with the steer
    taken in the store but not journaled, nor put in the thread; the follower runs the
    message itself, once. A dry replay of the failed run stops at the take, writing nothing."""
    with ScriptedOpenAI(gated_script) as server:
        gate = gated_agent(app, server, retries=0)
        _crashpoints.arm("signal.after_take", "raise", times=1)
        try:
            async with running_worker(app):
                first = await app.submit("helper", input="start", thread="t")
                await asyncio.wait_for(gate.entered.wait(), 30)  # type: ignore[attr-defined]
                follower = await app.submit("helper", input="also this", thread="t", on_busy="steer")
                gate.set()
                with pytest.raises(rw.RunFailed):
                    await first.result(timeout_s=30)
                assert await follower.result(timeout_s=30) == "start | also this"
                (outcome,) = [o for o in await replay(app, task="helper") if o.run_id == first.id]
                assert outcome.ok and "'model'" in outcome.detail, outcome.detail
                # Retried by hand, the failed run takes the same signal at the same place
                # again, and sees that its follower ran it: it is not delivered twice.
                await app.retry(first.id)
                assert await first.result(timeout_s=30) == "start"
        finally:
            _crashpoints.disarm("signal.after_take")
    history = await app.thread_history("t")
    assert [m.get("content") for m in history if m["role"] == "user"] == ["start", "also this"]
    assert not any(STEERED_FROM in m for m in history)
    assert_valid_history(server.requests[-1]["messages"])


async def test_a_crash_after_the_take_replays_to_one_delivery(app):
    """`signal.after_take` raises once: the attempt fails and is retried; the replay takes
    the same signal at the same position, and the message is delivered once."""
    with ScriptedOpenAI(gated_script) as server:
        gate = gated_agent(app, server, retries=2)
        _crashpoints.arm("signal.after_take", "raise", times=1)
        try:
            async with running_worker(app):
                first = await app.submit("helper", input="start", thread="t")
                await asyncio.wait_for(gate.entered.wait(), 30)  # type: ignore[attr-defined]
                follower = await app.submit("helper", input="also this", thread="t", on_busy="steer")
                gate.set()
                assert await first.result(timeout_s=30) == "start | also this"
        finally:
            _crashpoints.disarm("signal.after_take")
    assert (await first.refresh()).attempt == 2, "the crash point failed the first attempt"
    assert (await follower.refresh()).state is rw.RunState.CANCELLED
    assert_valid_history(server.requests[-1]["messages"])
    history = await app.thread_history("t")
    assert [m.get("content") for m in history if m["role"] == "user"] == ["start", "also this"]


def test_on_busy_steer_is_a_policy_of_every_face():
    from runwright.server._models import SubmitOptions
    from runwright.store._params import ON_BUSY

    assert "steer" in ON_BUSY
    assert SubmitOptions(thread="t", on_busy="steer").on_busy == "steer"


async def _state(app: rw.App, run_id: int) -> rw.RunState:
    return (await app.get(run_id)).state


async def _until(read, wanted, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while await read() is not wanted:
            await asyncio.sleep(0.02)



def test_the_readme_fragment_runs_and_prints_what_it_says(tmp_path):
    """The README's steering fragment, run as it is: each print's comment is its output."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("### Steering a running agent", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "steer_demo.py").write_text(code)
    done = subprocess.run([sys.executable, "steer_demo.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    promised = [line.split("# ", 1)[1] for line in code.splitlines() if "print(" in line]
    assert done.stdout.splitlines() == promised
