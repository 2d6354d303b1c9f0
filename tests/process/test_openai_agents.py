"""OpenAI Agents SDK agents on runwright survive a SIGKILLed worker, on every backend.

Workers are `runwright worker tests.process.oai_apps:app` subprocesses; their model is the
scripted OpenAI-protocol server in this process (it records every request), their tools
write a ledger (agent_apps.py), so a test sees every model call and every tool execution,
even those of a process it killed.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.runs import RunState

from ..agents.scripted_openai import Reply, call, last_role, tool_results
from . import agent_apps, oai_apps
from .agent_harness import AgentFleet
from .harness import WorkerFleet, WorkerProcess, owner_pid, wait_until
from .test_agents import ended, journal, taken_over_and_succeeded

pytestmark = pytest.mark.process

APP_SPEC = "tests.process.oai_apps:app"
HELD_S = 60.0  # a model reply held this long is one whose worker the test kills meanwhile


class SdkAgentFleet(AgentFleet):
    """AgentFleet's workers, on the SDK agent's app."""

    def start(self, lease_s: float | None = None, crash_points: str = "") -> WorkerProcess:
        assert self.model is not None, "serve_model() first: the worker needs its model"
        return WorkerFleet.start(self, lease_s=lease_s, app_spec=APP_SPEC, env={
            agent_apps.LEDGER_ENV: str(self.ledger), "OPENAI_BASE_URL": self.model.base_url,
            "OPENAI_API_KEY": "test", "RUNWRIGHT_CRASH_POINTS": crash_points})


@pytest.fixture
async def client(app: rw.App) -> AsyncIterator[rw.App]:
    app.tasks.update(oai_apps.app.tasks)
    yield app


@pytest.fixture
def agents(store_url: str, tmp_path: Path) -> Iterator[SdkAgentFleet]:
    fleet = SdkAgentFleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.dump_logs())  # captured by pytest, shown only when the test failed


async def kill_the_owner(client: rw.App, agents: SdkAgentFleet,
                         handle: rw.RunHandle) -> tuple[WorkerProcess, Any]:
    """SIGKILL the worker that owns the run; return it and the run as it stood."""
    run = await handle.refresh()
    assert run.state is RunState.RUNNING
    victim = agents.by_pid(await owner_pid(client, run))
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    return victim, run


async def test_a_worker_killed_between_a_tool_call_and_the_next_model_call_repeats_neither(
        client: rw.App, agents: SdkAgentFleet) -> None:
    """The worker is SIGKILLed while the model call after a completed tool call is in
    flight: another worker takes the run over and makes only that call again; the first
    model call and the tool call come from the journal."""
    held: list[int] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("lookup", {"order": "A-1"}, "c1")])
        if not held:  # the first model call after the tool: held until its worker is dead
            held.append(index)
            return Reply(content="too late", delay_s=HELD_S)
        return Reply(content=json.dumps(tool_results(body)))

    model = agents.serve_model(script)
    agents.start()
    agents.start()
    handle = await client.submit("clerk", input="where is A-1?")
    await wait_until(lambda: held, "the model call after the tool is in flight")
    victim, at_kill = await kill_the_owner(client, agents, handle)

    run = await taken_over_and_succeeded(handle, at_kill)
    assert json.loads(run.value()) == {"c1": "A-1 is packed"}
    assert [c.pid for c in agents.calls("lookup")] == [victim.pid], "the tool call is not made again"
    asked = [last_role(body) for body in model.requests]
    assert asked == ["user", "tool", "tool"], "only the call in flight at the kill is made again"
    (model_1, fence_1), (tool, tool_fence), (model_2, fence_2) = await journal(client, run.id)
    assert (model_1, tool, model_2) == ("model", "tool:lookup", "model")
    assert fence_1 == tool_fence == at_kill.fence < fence_2 == run.fence


async def test_an_at_most_once_tool_killed_mid_call_is_never_made_again(
        client: rw.App, agents: SdkAgentFleet) -> None:
    """SIGKILL inside the at-most-once `pay`: the takeover does not call it again, and the
    model is told its outcome is unknown."""
    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("pay", {"amount": 5}, "p1")])
        return Reply(content=json.dumps(tool_results(body)))

    model = agents.serve_model(script)
    agents.start()
    agents.start()
    handle = await client.submit("clerk", input="pay 5")
    await wait_until(lambda: agents.calls("pay"), "the run is inside pay")
    victim, at_kill = await kill_the_owner(client, agents, handle)

    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, run.error
    assert [c.pid for c in agents.calls("pay")] == [victim.pid], "pay executed once, never again"
    outcome = json.loads(tool_results(model.requests[-1])["p1"])
    assert outcome["error"] == "ToolOutcomeUnknown" and "not repeated" in outcome["message"]
    assert json.loads(run.value()) == tool_results(model.requests[-1])
    assert [last_role(body) for body in model.requests] == ["user", "tool"]
    (pay_step,) = [s for s in await client.store.step_list(run.id) if s.name == "tool:pay"]
    assert pay_step.status == "failed" and json.loads(pay_step.error)["type"] == "OutcomeUnknown"
    assert pay_step.fence > at_kill.fence
