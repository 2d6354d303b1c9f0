"""Tools that need a person's approval, on every backend: the run parks with a pending
approval any process can answer; an approved call runs, a denied one becomes the model's
tool result naming who refused and why, so the history stays valid."""

from __future__ import annotations

import json

import runwright as rw
from runwright.store._params import EventListParams

from ..integration.conftest import running_worker
from ..process.harness import wait_until
from .scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
from .test_agents import model_at


def two_transfers(body, index) -> Reply:
    if last_role(body) == "user":
        return Reply(tool_calls=[call("transfer", {"amount": 5, "to": "bo"}, "small"),
                                 call("transfer", {"amount": 5000, "to": "eve"}, "large")])
    return Reply(content=json.dumps(tool_results(body)))


async def test_only_the_calls_that_need_approval_wait_and_a_refusal_reaches_the_model(app):
    made: list = []

    @app.tool(approval=lambda args: args["amount"] > 100)
    def transfer(amount: int, to: str) -> str:
        """Send money."""
        made.append((amount, to))
        return f"sent {amount} to {to}"

    with ScriptedOpenAI(two_transfers) as server:
        app.agent("banker", model=model_at(server), tools=[transfer])
        async with running_worker(app):
            handle = await app.submit("banker", input="pay them")
            (pending,) = await wait_until(lambda: app.questions(), "the large transfer asks for approval")
            assert made == [(5, "bo")], "the small transfer needed no approval; the large one waits"
            assert (pending.run_id, pending.kind) == (handle.id, "approval")
            assert pending.body["tool"] == "transfer"
            assert pending.body["arguments"] == {"amount": 5000, "to": "eve"}
            await wait_until(lambda: _state(app, handle.id, rw.RunState.QUEUED), "the run parks")
            with_reason = {"approved": False, "reason": "over the daily limit"}
            await app.answer(handle.id, pending.id, with_reason, by="ana")
            answer = json.loads(await handle.result(timeout_s=30))
    assert made == [(5, "bo")], "a denied call is never made"
    assert answer == {"small": "sent 5 to bo",
                      "large": json.dumps({"error": "denied",
                                           "message": "denied by ana: over the daily limit"})}
    steps = [s.name for s in await app.store.step_list(handle.id)]
    assert steps == ["model", "tool:transfer", "approve:transfer", "model"]
    # The log says an approval was asked and answered, without the call's arguments.
    events = await app.store.event_list(EventListParams(handle.id))
    asked = [e.data for e in events if e.kind == "asked"]
    assert asked == [{"question": 2, "kind": "approval", "text": "Allow a call of tool 'transfer'?",
                      "tool": "transfer"}]
    assert [e.data for e in events if e.kind == "answered"] == [{"question": 2, "by": "ana"}]


async def test_an_approved_call_runs_once(app):
    made: list = []

    @app.tool(approval=True)
    def transfer(amount: int, to: str) -> str:
        """Send money."""
        made.append((amount, to))
        return "done"

    def script(body, index) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("transfer", {"amount": 7, "to": "bo"}, "t")])
        return Reply(content=tool_results(body)["t"])

    with ScriptedOpenAI(script) as server:
        app.agent("banker", model=model_at(server), tools=[transfer])
        async with running_worker(app):
            handle = await app.submit("banker", input="pay")
            (pending,) = await wait_until(lambda: app.questions(), "the transfer asks for approval")
            await app.answer(handle.id, pending.id, {"approved": True})
            assert await handle.result(timeout_s=30) == "done"
    assert made == [(7, "bo")]
    (question,) = await app.questions(handle.id, pending=False)
    assert (question.answer, question.answered_by) == ({"approved": True}, "operator")


async def _state(app: rw.App, run_id: int, state: rw.RunState) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.state is state


async def test_the_next_message_to_a_thread_supersedes_a_waiting_approval(app):
    made: list = []

    @app.tool(approval=True)
    def transfer(amount: int, to: str) -> str:
        """Send money."""
        made.append((amount, to))
        return "sent"

    def script(body, index) -> Reply:
        if body["messages"][-1]["content"] == "pay eve":
            return Reply(tool_calls=[call("transfer", {"amount": 5000, "to": "eve"}, "t1")])
        return Reply(content="understood")

    with ScriptedOpenAI(script) as server:
        app.agent("banker", model=model_at(server), tools=[transfer])
        async with running_worker(app):
            first = await app.submit("banker", input="pay eve", thread="chat")
            await wait_until(lambda: app.questions(), "the transfer waits for approval")
            await wait_until(lambda: _state(app, first.id, rw.RunState.QUEUED), "the run parks")
            # The person answers in the conversation instead: not refused as busy.
            second = await app.submit("banker", input="no, do not pay", thread="chat", on_busy="reject")
            assert await second.result(timeout_s=30) == "understood"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    assert made == []
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "user"]
    assert last[1]["tool_calls"][0]["id"] == "t1"
    assert last[2]["tool_call_id"] == "t1" and "not run" in last[2]["content"]
    assert last[3]["content"] == "no, do not pay"
    assert await app.questions() == [], "the superseded question waits no more"
