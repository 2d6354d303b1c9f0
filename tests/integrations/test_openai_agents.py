"""OpenAI Agents SDK agents run durably, in one process, on SQLite (the embedded default):
the SDK's real Runner and chat-completions model against the scripted OpenAI-protocol
server on loopback, which records every request."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    function_tool,
    input_guardrail,
    output_guardrail,
)
from pydantic import BaseModel

import runwright as rw
from runwright.integrations.openai_agents import AGENT_ITEM, idempotency_key, register, run_durably
from runwright.store._params import EventListParams

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
from ..integration.conftest import running_worker
from ..process.harness import wait_until
from .openai_agents_kit import chat_model, close_clients, tool_messages


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[rw.App]:
    app = rw.App(f"sqlite:///{tmp_path / 'runwright.db'}")
    await app.open()
    yield app
    await close_clients()
    await app.close()


async def events(app: rw.App, run_id: int, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in await app.store.event_list(EventListParams(run_id)) if e.kind == kind]


async def steps(app: rw.App, run_id: int) -> list[str]:
    return [s.name for s in await app.store.step_list(run_id)]


def add_then_hand_off(body: dict[str, Any], index: int) -> Reply:
    """The triage agent asks for `add` and hands off in one reply; the specialist answers
    with the tool results it sees."""
    if last_role(body) == "user":
        return Reply(tool_calls=[call("add", {"a": 2, "b": 3}, "c1"),
                                 call("transfer_to_billing", {}, "h1")], usage=(100, 20))
    return Reply(content=f"billing: {json.dumps(tool_results(body))}", usage=(200, 10))


def triage_and_billing(server: ScriptedOpenAI, made: list[Any]) -> Agent[Any]:
    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        made.append(("add", a, b))
        return a + b

    model = chat_model(server)
    billing = Agent(name="billing", instructions="You do billing.", model=model)
    return Agent(name="triage", instructions="Route the customer.", tools=[add], handoffs=[billing],
                 model=model)


async def test_a_handoff_runs_durably_with_its_items_usage_and_cost_as_events(app):
    made: list[Any] = []
    with ScriptedOpenAI(add_then_hand_off) as server:
        register(app, triage_and_billing(server, made), name="triage")
        async with running_worker(app):
            handle = await app.submit("triage", input="what do I owe?")
            answer = await handle.result(timeout_s=30)
    assert answer == 'billing: {"c1": "5", "h1": "{\\"assistant\\": \\"billing\\"}"}'
    assert made == [("add", 2, 3)]
    first, second = server.requests
    assert first["messages"][0] == {"role": "system", "content": "Route the customer."}
    # The handoff's model call is the specialist's, journaled as the first.
    assert second["messages"][0] == {"role": "system", "content": "You do billing."}
    assert await steps(app, handle.id) == ["model", "tool:add", "model"]
    models = await events(app, handle.id, "model")
    assert [(m["turn"], m["model"], m["usage"], m["tool_calls"]) for m in models] == [
        (1, "gpt-4o-mini", {"prompt_tokens": 100, "completion_tokens": 20}, ["add", "transfer_to_billing"]),
        (2, "gpt-4o-mini", {"prompt_tokens": 200, "completion_tokens": 10}, [])]
    assert models[0]["cost_usd"] == pytest.approx((100 * 0.15 + 20 * 0.60) / 1e6) and models[0]["priced"]
    assert all(m["latency_s"] >= 0 for m in models)
    assert await events(app, handle.id, AGENT_ITEM) == [
        {"item": "tool_called", "agent": "triage", "tool": "add", "call_id": "c1"},
        {"item": "handoff", "agent": "triage", "to": "billing", "call_id": "h1"},
        {"item": "tool_output", "agent": "triage", "tool": "add", "call_id": "c1", "output": "5"},
        {"item": "message", "agent": "billing", "text": answer}]


async def test_a_retried_attempt_replays_completed_model_and_tool_calls_from_the_journal(app):
    """The second model call fails (HTTP 500, no client retries) and the run is retried: the
    retry replays the first model call and the tool call from the journal, and makes only
    the failed call again."""
    made: list[Any] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        if index == 1:
            return Reply(status=500, error="overloaded")
        return add_then_hand_off(body, index)

    with ScriptedOpenAI(script) as server:
        register(app, triage_and_billing(server, made), name="triage", retries=1,
                 backoff=rw.Backoff(base_s=0.01, factor=1, cap_s=0.01))
        async with running_worker(app):
            handle = await app.submit("triage", input="what do I owe?")
            assert (await handle.result(timeout_s=30)).startswith("billing: ")
    assert made == [("add", 2, 3)], "the completed tool call is not made again"
    user_only = [r for r in server.requests if last_role(r) == "user"]
    assert len(user_only) == 1, "the completed model call is not made again"
    assert len(server.requests) == 3  # the first, the failed second, the second again
    assert (await handle.refresh()).attempt == 2
    assert await steps(app, handle.id) == ["model", "tool:add", "model"]


async def test_an_input_guardrail_trips_and_an_output_guardrail_trips(app):
    @input_guardrail
    def no_secrets(context: RunContextWrapper[Any], agent: Agent[Any], input: Any) -> GuardrailFunctionOutput:
        text = json.dumps(input)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in text)

    @output_guardrail
    def no_shouting(context: RunContextWrapper[Any], agent: Agent[Any],
                    output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=str(output).isupper())

    def script(body: dict[str, Any], index: int) -> Reply:
        return Reply(content="HELLO" if "shout" in json.dumps(body) else "hi")

    with ScriptedOpenAI(script) as server:
        agent = Agent(name="guarded", model=chat_model(server), input_guardrails=[no_secrets],
                      output_guardrails=[no_shouting])
        register(app, agent, retries=3)
        async with running_worker(app):
            fine = await app.submit("guarded", input="hello")
            assert await fine.result(timeout_s=30) == "hi"
            tripped_in = await app.submit("guarded", input="my password is hunter2")
            tripped_out = await app.submit("guarded", input="shout")
            for handle, guardrail in ((tripped_in, "no_secrets"), (tripped_out, "no_shouting")):
                with pytest.raises(rw.RunFailed, match=f"guardrail '{guardrail}' tripped"):
                    await handle.result(timeout_s=30)
                run = await handle.refresh()
                assert run.state is rw.RunState.FAILED and run.attempt == 1, "final: not retried"


async def test_streamed_text_goes_to_token_events_that_fold_into_the_answer(app):
    text = "Streaming, durably: every piece of this reply reaches the run's log. " * 6

    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("add", {"a": 1, "b": 1}, "c1")])
        return Reply(content=text, chunk_delay_s=0.001)

    with ScriptedOpenAI(script) as server:
        register(app, triage_and_billing(server, []), name="streamer", stream=True)
        async with running_worker(app):
            handle = await app.submit("streamer", input="talk")
            assert await handle.result(timeout_s=30) == text
    assert all(body.get("stream") for body in server.requests)
    tokens = await events(app, handle.id, "tokens")
    assert len(tokens) > 1 and {t["call"] for t in tokens} == {2}  # the second model call's position
    folded = rw.TokenText()
    for event in await app.store.event_list(EventListParams(handle.id)):
        folded.add(event)
    assert folded.text == text
    assert [m["turn"] for m in await events(app, handle.id, "model")] == [1, 2]
    assert await steps(app, handle.id) == ["model", "tool:add", "model"]


async def test_the_budget_bounds_cost_and_turns(app):
    def always_a_tool(body: dict[str, Any], index: int) -> Reply:
        return Reply(tool_calls=[call("add", {"a": index, "b": 1}, f"c{index}")], usage=(1_000_000, 0))

    with ScriptedOpenAI(always_a_tool) as server:
        register(app, triage_and_billing(server, []), name="spender")
        async with running_worker(app):
            costly = await app.submit("spender", input="go", budget=rw.Budget(max_cost_usd=0.20))
            with pytest.raises(rw.RunFailed, match=r"max_cost_usd=\$0.2 after 2 model calls"):
                await costly.result(timeout_s=30)
            long = await app.submit("spender", input="go", budget=rw.Budget(max_turns=3))
            with pytest.raises(rw.RunFailed, match="max_turns=3 model calls"):
                await long.result(timeout_s=30)
    assert (await costly.refresh()).state is rw.RunState.FAILED
    assert len(await events(app, costly.id, "model")) == 2  # $0.15 a call: the second went over
    assert len(await events(app, long.id, "model")) == 3


async def test_a_thread_keeps_the_sdk_items_and_the_next_run_reads_them(app):
    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("add", {"a": 1, "b": index}, f"c{index}")])
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return Reply(content=f"seen {users} and {len(tool_messages(body))} tool results")

    with ScriptedOpenAI(script) as server:
        agent = triage_and_billing(server, [])
        register(app, agent.clone(handoffs=[]), name="chat")
        async with running_worker(app):
            first = await app.submit("chat", input="one", thread="t")
            assert await first.result(timeout_s=30) == "seen ['one'] and 1 tool results"
            second = await app.submit("chat", input="two", thread="t")
            assert await second.result(timeout_s=30) == "seen ['one', 'two'] and 2 tool results"
    history = await app.thread_history("t")
    assert [item.get("type", item.get("role")) for item in history] == [
        "user", "function_call", "function_call_output", "message"] * 2


@pytest.mark.parametrize("mode", ["interrupt", "rollback"])
async def test_interrupt_and_rollback_leave_a_history_the_next_run_can_send(app, mode):
    """A run inside the first of two tool calls is interrupted by a newer message: the
    started call finishes and keeps its output, the other gets an "interrupted" one
    (rollback: the run's items are dropped), and the new run's request is one the
    chat-completions API accepts: every tool call answered, once."""
    entered, release = asyncio.Event(), asyncio.Event()
    made: list[str] = []

    @function_tool
    async def slow_lookup(what: str) -> str:
        """Look something up, slowly."""
        made.append(what)
        if what == "first":
            entered.set()
            await release.wait()
        return f"found {what}"

    def script(body: dict[str, Any], index: int) -> Reply:
        if body["messages"][-1] == {"role": "user", "content": "start"}:
            return Reply(tool_calls=[call("slow_lookup", {"what": "first"}, "a"),
                                     call("slow_lookup", {"what": "second"}, "b")])
        return Reply(content=json.dumps(dict(tool_messages(body))))

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="researcher", model=chat_model(server), tools=[slow_lookup]))
        async with running_worker(app, concurrency=4, cancel_poll_s=0.05) as worker:
            old = await app.submit("researcher", input="start", thread="t")
            await asyncio.wait_for(entered.wait(), 30)
            new = await app.submit("researcher", input="stop, new question", thread="t", on_busy=mode)
            await wait_until(lambda: worker.control_of(old.id).interrupt == mode, "the worker knows")
            release.set()
            with pytest.raises(rw.RunFailed, match="ended interrupted"):
                await old.result(timeout_s=30)
            answer = json.loads(await new.result(timeout_s=30))
    assert made == ["first"], "the started call finished; the unstarted one never ran"
    last = server.requests[-1]["messages"]
    calls = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    if mode == "interrupt":
        assert calls == ["a", "b"]
        assert [m["role"] for m in last] == ["user", "assistant", "tool", "tool", "user"]
        assert answer["a"] == "found first" and json.loads(answer["b"])["error"] == "interrupted"
    else:
        assert calls == [] and answer == {}
        assert last == [{"role": "user", "content": "stop, new question"}]


async def test_a_tool_that_needs_approval_parks_the_run_until_a_person_answers(app):
    made: list[Any] = []

    async def large(context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str) -> bool:
        return bool(arguments["amount"] > 100)

    @function_tool(needs_approval=large)
    def transfer(amount: int, to: str) -> str:
        """Send money."""
        made.append((amount, to))
        return f"sent {amount} to {to}"

    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("transfer", {"amount": 5, "to": "bo"}, "small"),
                                     call("transfer", {"amount": 5000, "to": "eve"}, "large")])
        return Reply(content=json.dumps(tool_results(body)))

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="banker", model=chat_model(server), tools=[transfer]))
        async with running_worker(app):
            denied = await app.submit("banker", input="pay them")
            (pending,) = await wait_until(lambda: app.questions(), "the large transfer asks")
            assert made == [(5, "bo")] and pending.body["tool"] == "transfer"
            assert pending.body["arguments"] == {"amount": 5000, "to": "eve"}
            await app.answer(denied.id, pending.id, {"approved": False, "reason": "too much"}, by="ana")
            answer = json.loads(await denied.result(timeout_s=30))
            approved = await app.submit("banker", input="pay them again")
            (pending,) = await wait_until(lambda: app.questions(), "the large transfer asks again")
            await app.answer(approved.id, pending.id, {"approved": True}, by="ana")
            assert json.loads(await approved.result(timeout_s=30))["large"] == "sent 5000 to eve"
    assert answer == {"small": "sent 5 to bo",
                      "large": json.dumps({"error": "denied", "message": "denied by ana: too much"})}
    assert made == [(5, "bo"), (5, "bo"), (5000, "eve")], "the denied call was never made"
    assert await steps(app, denied.id) == ["model", "tool:transfer", "approve:transfer", "model"]


async def test_an_idempotent_tool_gets_its_stable_key(app):
    keys: list[str] = []

    @function_tool
    def charge(amount: int) -> str:
        """Charge a card."""
        keys.append(idempotency_key())
        return f"charged {amount}"

    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("charge", {"amount": 7}, "c1")])
        return Reply(content="done")

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="till", model=chat_model(server), tools=[charge]),
                 tools={"charge": "idempotent"})
        async with running_worker(app):
            handle = await app.submit("till", input="charge 7")
            assert await handle.result(timeout_s=30) == "done"
    assert keys == [f"{handle.id}:1"]  # run_id:position, the position after the first model call


async def test_run_durably_inside_a_task_of_ones_own_and_misuse_is_a_clear_error(app):
    with ScriptedOpenAI(lambda body, index: Reply(content="hello back")) as server:
        agent = Agent(name="plain", model=chat_model(server))

        @app.task
        async def greet(ctx: rw.Context, name: str) -> str:
            result = await run_durably(ctx, agent, f"hello {name}")
            return f"{result.final_output} ({result.last_agent.name})"

        async with running_worker(app):
            assert await (await app.submit(greet, name="ann")).result(timeout_s=30) == "hello back (plain)"
        with pytest.raises(rw.ConfigError, match="inside a runwright task"):
            await run_durably(None, agent, "hi")  # type: ignore[arg-type]
    with pytest.raises(rw.ConfigError, match="delivery must be one of"):
        register(app, agent, name="bad", tools={"x": "exactly_once"})
    with pytest.raises(rw.ConfigError, match="ModelSettings.retry is not supported"):
        from agents import ModelSettings
        from agents.retry import ModelRetrySettings

        retrying = agent.clone(model_settings=ModelSettings(retry=ModelRetrySettings(max_retries=2)))
        register(app, Agent(name="front", handoffs=[retrying]), name="bad")
    with pytest.raises(rw.ConfigError, match="must be an agents.Agent"):
        register(app, "not an agent", name="bad")  # type: ignore[arg-type]


class Verdict(BaseModel):
    ok: bool
    reason: str


async def test_a_structured_output_is_the_runs_json_value(app):
    reply = Reply(content=json.dumps({"ok": True, "reason": "fine"}))
    with ScriptedOpenAI(lambda body, index: reply) as server:
        register(app, Agent(name="judge", model=chat_model(server), output_type=Verdict))
        async with running_worker(app):
            handle = await app.submit("judge", input="judge this")
            assert await handle.result(timeout_s=30) == {"ok": True, "reason": "fine"}


async def test_mcp_tools_are_journaled_with_the_delivery_their_annotations_give(app, tmp_path):
    """A read-only MCP tool is idempotent (its key travels in the request's `_meta`); one
    that claims nothing is at-most-once; the user's choice by name wins over both."""
    import sys

    from agents.mcp import MCPServerStdio

    ledger = tmp_path / "mcp.log"

    def script(body: dict[str, Any], index: int) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("order_status", {"order_id": 42}, "s"),
                                     call("cancel_order", {"order_id": 42}, "c")])
        return Reply(content=json.dumps(tool_results(body)))

    server_path = Path(__file__).with_name("oai_mcp_server.py")
    with ScriptedOpenAI(script) as model_server:
        orders = MCPServerStdio(params={"command": sys.executable, "args": [str(server_path)],
                                        "env": {**os.environ, "RUNWRIGHT_MCP_LEDGER": str(ledger)}},
                                name="orders")
        agent = Agent(name="clerk", model=chat_model(model_server), mcp_servers=[orders])
        register(app, agent)
        register(app, agent, name="clerk-overridden", tools={"order_status": "at_least_once"})
        async with running_worker(app):
            handle = await app.submit("clerk", input="cancel 42")
            assert json.loads(await handle.result(timeout_s=30)) == {
                "s": [{"type": "text", "text": "order 42 shipped"}],
                "c": [{"type": "text", "text": "order 42 cancelled"}]}
            overridden = await app.submit("clerk-overridden", input="cancel 42")
            await overridden.result(timeout_s=30)
    journal = await app.store.step_list(handle.id)
    assert [s.name for s in journal] == ["model", "tool:order_status", "tool:cancel_order", "model"]
    assert ledger.read_text().splitlines() == [
        f"order_status {handle.id}:1", "cancel_order -",  # idempotent with its key; at-most-once
        "order_status -", "cancel_order -"]  # at-least-once by the user's choice: no key
    steps_overridden = await app.store.step_list(overridden.id)
    assert [s.status for s in steps_overridden] == ["done"] * 4


async def test_a_handoff_input_filter_trims_what_the_specialist_sees_not_the_thread(app):
    """The handoff removes the tool items from what billing is sent; the thread keeps them
    all, every call answered, and the next run sends them back whole."""
    from agents import handoff
    from agents.extensions.handoff_filters import remove_all_tools

    def script(body: dict[str, Any], index: int) -> Reply:
        triage = body["messages"][0]["content"] == "Route the customer."
        if triage and last_role(body) == "user":  # each run's calls with ids of their own
            return Reply(tool_calls=[call("add", {"a": 2, "b": 3}, f"c{index}"),
                                     call("transfer_to_billing", {}, f"h{index}")])
        return Reply(content=f"billing: {json.dumps(tool_results(body))}")

    made: list[Any] = []
    with ScriptedOpenAI(script) as server:
        triage = triage_and_billing(server, made)
        billing = triage.handoffs[0]
        assert isinstance(billing, Agent)
        register(app, triage.clone(handoffs=[handoff(billing, input_filter=remove_all_tools)]),
                 name="triage")
        async with running_worker(app):
            first = await app.submit("triage", input="what do I owe?", thread="t")
            assert await first.result(timeout_s=30) == "billing: {}"  # billing saw no tool items
            second = await app.submit("triage", input="and now?", thread="t")
            await second.result(timeout_s=30)
    history = await app.thread_history("t")
    kinds = [item.get("type", item.get("role")) for item in history]
    assert kinds[:6] == ["user", "function_call", "function_call", "function_call_output",
                         "function_call_output", "message"]
    assert {item["call_id"]: item["output"] for item in history[:6]
            if item.get("type") == "function_call_output"} == {"c0": "5", "h0": '{"assistant": "billing"}'}
    second_request = server.requests[2]["messages"]
    assert [m["role"] for m in second_request] == ["system", "user", "assistant", "tool", "tool",
                                                   "assistant", "user"]


async def test_a_stream_cut_mid_reply_is_made_again_and_the_tokens_fold_to_the_final_text(app):
    """The first attempt's stream is cut after some text (no client retries: the attempt
    fails); the retry makes the call again under a new claim, after a `tokens_reset`, so the
    folded text is exactly the final reply."""
    text = "The whole answer, streamed in small pieces to whoever follows the run."

    def script(body: dict[str, Any], index: int) -> Reply:
        if index == 0:  # slow enough that some text is flushed to the log before the cut
            return Reply(content=text, cut_after=20, chunk_delay_s=0.05)
        return Reply(content=text)

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="talker", model=chat_model(server)), stream=True, retries=1,
                 backoff=rw.Backoff(base_s=0.01, factor=1, cap_s=0.01))
        async with running_worker(app):
            handle = await app.submit("talker", input="talk")
            assert await handle.result(timeout_s=30) == text
    logged = await app.store.event_list(EventListParams(handle.id))
    kinds = [e.kind for e in logged if e.kind in ("tokens", "tokens_reset")]
    assert "tokens_reset" in kinds and kinds.index("tokens_reset") > 0, kinds
    assert "".join(e.data["text"] for e in logged if e.kind == "tokens") != text  # the cut text too
    folded = rw.TokenText()
    for event in logged:
        folded.add(event)
    assert folded.text == text


async def test_a_waiting_approval_superseded_by_a_newer_message_is_answered_not_run(app):
    """The run waits for a person's approval; the next message to its thread ends it
    `interrupted`, and the new run's history answers the waiting call "not run"."""
    made: list[Any] = []

    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Send money."""
        made.append(amount)
        return f"sent {amount}"

    def script(body: dict[str, Any], index: int) -> Reply:
        if body["messages"][-1] == {"role": "user", "content": "pay 50"}:
            return Reply(tool_calls=[call("transfer", {"amount": 50}, "t1")])
        return Reply(content=json.dumps(dict(tool_messages(body))))

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="banker", model=chat_model(server), tools=[transfer]))
        async with running_worker(app):
            waiting = await app.submit("banker", input="pay 50", thread="t")
            await wait_until(lambda: app.questions(), "the transfer asks for approval")
            newer = await app.submit("banker", input="never mind", thread="t")
            answer = json.loads(await newer.result(timeout_s=30))
            with pytest.raises(rw.RunFailed, match="ended interrupted"):
                await waiting.result(timeout_s=30)
    assert made == []
    assert json.loads(answer["t1"])["error"] == "not run"
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "user"]


async def test_an_interrupt_cuts_a_model_call_in_flight(app):
    """A newer message on the thread cuts the run's model call at once (no reply kept, the
    call not journaled); the new run goes next and sees the first run's message only."""
    def script(body: dict[str, Any], index: int) -> Reply:
        if index == 0:
            return Reply(content="too late", delay_s=30)
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return Reply(content=f"re: {users}")

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="chat", model=chat_model(server)))
        async with running_worker(app, cancel_poll_s=0.05):
            first = await app.submit("chat", input="think hard", thread="t")
            await wait_until(lambda: server.requests, "the slow model call is in flight")
            began = asyncio.get_running_loop().time()
            newest = await app.submit("chat", input="now", thread="t", on_busy="interrupt")
            assert await newest.result(timeout_s=20) == "re: ['think hard', 'now']"
            assert asyncio.get_running_loop().time() - began < 20, "not waited out"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    assert await steps(app, first.id) == ["thread:history"]  # the cut call is not journaled


async def test_a_request_the_provider_refuses_ends_the_run_at_once(app):
    def script(body: dict[str, Any], index: int) -> Reply:
        return Reply(status=400, error="messages: too long")

    with ScriptedOpenAI(script) as server:
        register(app, Agent(name="refused", model=chat_model(server)), retries=3)
        async with running_worker(app):
            handle = await app.submit("refused", input="hi")
            with pytest.raises(rw.RunFailed, match="HTTP 400: messages: too long"):
                await handle.result(timeout_s=30)
    run = await handle.refresh()
    assert run.state is rw.RunState.FAILED and run.attempt == 1 and len(server.requests) == 1
