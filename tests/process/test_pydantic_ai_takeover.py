"""A durable Pydantic AI agent survives its worker's SIGKILL, on every backend: another
worker resumes it from its last completed model request or tool call. The scripted
server's request log shows each model request made once; the tools' ledger shows each
tool execution, even one whose process was killed before the store heard of it."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest

import runwright as rw
from runwright.runs import Run, RunState
from runwright.store._params import EventListParams

from ..agents.scripted_openai import Reply, call, tool_results
from . import agent_apps, pydantic_ai_apps
from .agent_harness import AgentFleet
from .harness import WorkerProcess, owner_pid, wait_until

pytestmark = pytest.mark.process

APP_SPEC = "tests.process.pydantic_ai_apps:app"
TASK = "pyd_orders"


class PydanticFleet(AgentFleet):
    """Workers of the Pydantic AI app, on the test's scripted model server."""

    def start(self, lease_s: float | None = None, crash_points: str = "",  # type: ignore[override]
              hold_transfer: bool = False) -> WorkerProcess:
        assert self.model is not None, "serve_model() first: the worker needs its model"
        env = {agent_apps.LEDGER_ENV: str(self.ledger), "OPENAI_BASE_URL": self.model.base_url,
               "OPENAI_API_KEY": "test", "RUNWRIGHT_CRASH_POINTS": crash_points,
               "HOLD_TRANSFER": "1" if hold_transfer else ""}
        return super(AgentFleet, self).start(lease_s=lease_s, app_spec=APP_SPEC, env=env)


@pytest.fixture
def agents(store_url: str, tmp_path: Path) -> Iterator[PydanticFleet]:
    fleet = PydanticFleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.dump_logs())  # captured by pytest, shown only when the test failed


def prepare_then_transfer(body: dict[str, Any], index: int) -> Reply:
    """Turn 1: prepare the order; turn 2: transfer it; turn 3: answer with the results."""
    results = tool_results(body)
    order = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if not results:
        return Reply(tool_calls=[call("prepare", {"order": order}, "p")])
    if "t" not in results:
        return Reply(tool_calls=[call("transfer", {"order": order}, "t")])
    return Reply(content=json.dumps(results))


async def ended(handle: rw.RunHandle) -> Run | None:
    run = await handle.refresh()
    return run if run.done else None


async def test_a_takeover_between_a_tool_call_and_the_next_model_request_repeats_nothing(
        app: rw.App, agents: PydanticFleet) -> None:
    """The first worker dies (SIGKILL) right after `prepare`'s result is journaled, before
    the next model request; a second worker resumes the agent: the first model request and
    `prepare` come from the journal, only what follows is made, each once."""
    app.tasks.update(pydantic_ai_apps.app.tasks)  # the client knows the task by name
    model = agents.serve_model(prepare_then_transfer)
    victim = agents.start(crash_points="step.after_journal:tool:prepare=kill")
    handle = await app.submit(TASK, prompt="order-7", thread="customer")
    assert await victim.wait_exit() == -signal.SIGKILL
    at_kill = await handle.refresh()
    assert [s.name for s in await app.store.step_list(handle.id)] == [
        "thread:history", "model", "tool:prepare"]
    assert len(model.requests) == 1
    survivor = agents.start()

    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, f"the run ended {run.state.value}: {run.error}"
    assert run.fence > at_kill.fence
    assert json.loads(run.value()) == {"p": "prepared order-7", "t": "transferred order-7"}
    assert len(model.requests) == 3, "no model request made twice"
    assert [c.pid for c in agents.calls("prepare")] == [victim.pid], "prepare made once, by the victim"
    assert [c.pid for c in agents.calls("transfer")] == [survivor.pid]
    journal = [(s.name, s.fence) for s in await app.store.step_list(handle.id)]
    assert [name for name, _ in journal] == [
        "thread:history", "model", "tool:prepare", "model", "tool:transfer", "model"]
    assert journal[2][1] == at_kill.fence < journal[3][1] == run.fence
    # The thread holds each message once, whatever the replay appended again.
    history = await app.thread_history("customer")
    assert [m["kind"] for m in history] == ["request", "response"] * 3
    assert [p["part_kind"] for m in history for p in m["parts"]] == [
        "user-prompt", "tool-call", "tool-return", "tool-call", "tool-return", "text"]


async def test_an_at_most_once_tool_killed_mid_call_is_never_made_again(
        app: rw.App, agents: PydanticFleet) -> None:
    """SIGKILL the worker inside `transfer` (at most once): the next worker does not call
    it again, and the model is told its outcome is unknown."""
    app.tasks.update(pydantic_ai_apps.app.tasks)  # the client knows the task by name
    model = agents.serve_model(prepare_then_transfer)
    victim = agents.start(hold_transfer=True)
    handle = await app.submit(TASK, prompt="order-9")
    await wait_until(lambda: agents.calls("transfer"), "the run is inside transfer")
    run = await handle.refresh()
    assert run.state is RunState.RUNNING and await owner_pid(app, run) == victim.pid
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    agents.start()

    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, f"the run ended {run.state.value}: {run.error}"
    assert [c.pid for c in agents.calls("transfer")] == [victim.pid], "transfer made once, never again"
    assert [c.pid for c in agents.calls("prepare")] == [victim.pid]
    outcome = json.loads(tool_results(model.requests[-1])["t"])
    assert outcome["error"] == "ToolOutcomeUnknown", outcome
    assert len(model.requests) == 3, "the two model requests before the kill were not made again"
    (step,) = [s for s in await app.store.step_list(handle.id) if s.name == "tool:transfer"]
    assert step.status == "failed" and json.loads(step.error or "")["type"] == "OutcomeUnknown"


TEXT = "Your order left the warehouse this morning; it should reach you by Thursday. " * 3


async def test_a_takeover_mid_stream_resets_the_streamed_text(app: rw.App, agents: PydanticFleet) -> None:
    """SIGKILL the worker while the model's reply streams: the next worker makes the call
    again, a `tokens_reset` under its claim voids the dead owner's text, and the folded
    text is exactly the final answer."""
    app.tasks.update(pydantic_ai_apps.app.tasks)
    model = agents.serve_model(lambda body, index: Reply(content=TEXT, chunk_delay_s=0.02))
    victim = agents.start()
    handle = await app.submit("pyd_stream", prompt="where is it?")

    async def streaming() -> bool:
        return any(e.kind == "tokens" for e in await app.store.event_list(EventListParams(handle.id)))

    await wait_until(streaming, "the reply streams")
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    agents.start()

    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED and run.value() == TEXT
    events = list(await app.store.event_list(EventListParams(handle.id)))
    resets = [e.data for e in events if e.kind == "tokens_reset"]
    assert resets and resets[-1]["fence"] == run.fence and resets[-1]["call"] == 0
    fences = {e.data["fence"] for e in events if e.kind == "tokens"}
    assert min(fences) < run.fence and run.fence in fences, "the dead owner's text, then the new one's"
    assert rw.TokenText(events).text == TEXT
    assert len(model.requests) >= 2, "the cut call was made again (a model request is at least once)"
