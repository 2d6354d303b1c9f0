"""Steering a running agent across a SIGKILL, with real worker processes, on every backend.

The agent's turn waits on a gate (its tool call in flight); a message is steered to it
(`on_busy="steer"`); the gate opens; the worker is SIGKILLed right after taking the steer
(before its journal entry: `signal.after_take`) or right after putting the message in the
thread (before ending its follower run: `steer.after_absorb`). Another worker takes the
run over: the message reaches the next model call once, after the tool's result, the
thread holds it once, in order, and the follower never runs.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.agents._steering import STEERED_FROM
from runwright.runs import Run, RunState

from ..agents.scripted_openai import Reply, call, last_role
from ..agents.test_steering import assert_valid_history
from . import agent_apps, oai_apps, pydantic_ai_apps
from .agent_harness import AgentFleet
from .harness import wait_until
from .test_openai_agents import SdkAgentFleet
from .test_pydantic_ai_takeover import PydanticFleet

pytestmark = pytest.mark.process


@pytest.fixture
async def client(app: rw.App) -> AsyncIterator[rw.App]:
    app.tasks.update(agent_apps.app.tasks)
    app.tasks.update(oai_apps.app.tasks)
    app.tasks.update(pydantic_ai_apps.app.tasks)
    yield app


@pytest.fixture
def agents(store_url: str, tmp_path: Path) -> Iterator[AgentFleet]:
    fleet = AgentFleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.dump_logs())  # captured by pytest, shown only when the test failed


@pytest.fixture(params=["openai_agents", "pydantic_ai"])
def framework_agents(request: pytest.FixtureRequest, store_url: str,
                     tmp_path: Path) -> Iterator[tuple[AgentFleet, str, str]]:
    """Workers of a framework adapter's app, its steerable agent's task and its text argument."""
    if request.param == "openai_agents":
        fleet: AgentFleet = SdkAgentFleet(store_url, tmp_path)
        task, argument = "sdk_steerable", "input"
    else:
        fleet, task, argument = PydanticFleet(store_url, tmp_path), "pyd_steerable", "prompt"
    try:
        yield fleet, task, argument
    finally:
        fleet.close()
        print(fleet.dump_logs())  # captured by pytest, shown only when the test failed


def gated(body: dict[str, Any], index: int) -> Reply:
    """"start" asks for the gated tool; later calls answer with the user messages seen."""
    if last_role(body) == "user" and body["messages"][-1]["content"] == "start":
        return Reply(tool_calls=[call("wait_gate", {"name": "g"}, "c1")])
    return Reply(content=" | ".join(m["content"] for m in body["messages"] if m["role"] == "user"))


async def ended(handle: rw.RunHandle) -> Run | None:
    run = await handle.refresh()
    return run if run.done else None


@pytest.mark.parametrize("crash_point", ["signal.after_take:runwright.steer", "steer.after_absorb"])
async def test_a_steer_survives_a_sigkill_and_is_delivered_once(
        client: rw.App, agents: AgentFleet, crash_point: str) -> None:
    model = agents.serve_model(gated)
    victim = agents.start(crash_points=f"{crash_point}=kill")
    handle = await client.submit("steerable", input="start", thread="t")
    await wait_until(lambda: agents.calls("wait_gate"), "the agent's turn waits on the gate")
    agents.start()  # the survivor
    follower = await client.submit("steerable", input="also this", thread="t", on_busy="steer")
    (agents.ledger / "gate-g").touch()

    assert await victim.wait_exit() == -signal.SIGKILL, "killed at the crash point"
    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, f"the run ended {run.state.value}: {run.error}"
    assert run.recoveries >= 1
    assert run.value() == "start | also this"

    # The model call after the takeover: the message once, after the tool's result.
    last = model.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "user"]
    assert last[-1] == {"role": "user", "content": "also this"}
    for request in model.requests:
        assert_valid_history(request["messages"])
        assert [m.get("content") for m in request["messages"]].count("also this") <= 1
    assert len(agents.calls("wait_gate")) == 1, "the tool was journaled before the kill"

    history = await client.thread_history("t")
    assert [(m["role"], m.get("content")) for m in history] == [
        ("user", "start"), ("assistant", None), ("tool", "gate g opened"), ("user", "also this"),
        ("assistant", "start | also this")]
    assert history[3][STEERED_FROM] == follower.id

    gone = await wait_until(lambda: ended(follower), "the follower ends")
    assert gone.state is RunState.CANCELLED and gone.started_at is None, "the follower never ran"
    assert gone.error_info()["message"] == f"delivered into run {run.id}"
    kinds = [e.kind for e in await client.events_page(handle.id)]
    assert kinds.count("steered") == 1


async def test_a_steer_to_a_framework_agent_survives_a_sigkill_and_is_delivered_once(
        client: rw.App, framework_agents: tuple[AgentFleet, str, str]) -> None:
    """The same for an OpenAI Agents SDK agent and a Pydantic AI agent, killed between
    absorbing and ending the follower: its next model call (by the survivor) has the
    message once, after the tool's output, and the follower never runs."""
    agents, task, argument = framework_agents
    model = agents.serve_model(gated)
    victim = agents.start(crash_points="steer.after_absorb=kill")
    handle = await client.submit(task, thread="t", **{argument: "start"})
    await wait_until(lambda: agents.calls("wait_gate"), "the agent's turn waits on the gate")
    agents.start()
    follower = await client.submit(task, thread="t", on_busy="steer", **{argument: "also this"})
    (agents.ledger / "gate-g").touch()

    assert await victim.wait_exit() == -signal.SIGKILL, "killed at the crash point"
    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, f"the run ended {run.state.value}: {run.error}"
    assert run.recoveries >= 1 and run.value() == "start | also this"
    last = model.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "user"]
    assert last[-1]["content"] == "also this"
    for request in model.requests:
        assert_valid_history(request["messages"])
    history = await client.thread_history("t")
    assert [m[STEERED_FROM] for m in history if STEERED_FROM in m] == [follower.id]
    gone = await wait_until(lambda: ended(follower), "the follower ends")
    assert gone.state is RunState.CANCELLED and gone.started_at is None, "the follower never ran"
