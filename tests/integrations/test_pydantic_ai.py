"""Durable Pydantic AI agents (runwright.integrations.pydantic_ai), in process: a real
worker on SQLite, Pydantic AI's own OpenAI model on the scripted OpenAI-protocol server,
real MCP servers (stdio). What a takeover does with real processes is in
tests/process/test_pydantic_ai_takeover.py."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    UserPromptPart,
)

import runwright as rw
from runwright.errors import ConfigError
from runwright.integrations.pydantic_ai import RunwrightAgent, idempotency_key
from runwright.store._params import EventListParams

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, tool_results
from ..integration.conftest import running_worker
from ..ports import free_port
from ..process.harness import wait_until
from .pydantic_ai_helpers import (
    ask_tools_then_report,
    close_models,
    collect_stdio_leftovers,
    model_for,
    tool_calls_answered,
    user_messages,
)

MCP_SERVER = Path(__file__).parents[2] / "examples" / "pydantic_ai_mcp_server.py"
FAST = rw.Backoff(base_s=0.01, factor=1, cap_s=0.01)
SLOW_S = 300.0  # a reply this late never comes within a test


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


async def events(app: rw.App, run_id: int) -> list[rw.Event]:
    return list(await app.store.event_list(EventListParams(run_id)))


async def steps(app: rw.App, run_id: int) -> list[str]:
    return [s.name for s in await app.store.step_list(run_id)]


async def state_is(app: rw.App, run_id: int, state: rw.RunState) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.state is state


# -- model requests and tool calls are steps ----------------------------------------------

async def test_model_requests_and_tool_calls_are_journaled_steps_with_model_events(app: rw.App) -> None:
    made: list[str] = []
    with ScriptedOpenAI(ask_tools_then_report(("lookup", {"order": "A1"}))) as server:
        agent = Agent(model_for(server), name="support")

        @agent.tool_plain
        def lookup(order: str) -> str:
            """Look an order up."""
            made.append(order)
            return f"{order}: shipped"

        task = RunwrightAgent(agent).register(app)
        async with running_worker(app):
            handle = await app.submit(task, prompt="where is A1?")
            assert json.loads(await handle.result(timeout_s=30)) == {"c1": "A1: shipped"}
    assert made == ["A1"]
    assert await steps(app, handle.id) == ["model", "tool:lookup", "model"]
    journal = await app.store.step_list(handle.id)
    first = journal[0].value()["response"]
    assert first["kind"] == "response" and first["parts"][0]["part_kind"] == "tool-call", \
        "the journaled response is Pydantic AI's own JSON form"
    models = [e.data for e in await events(app, handle.id) if e.kind == "model"]
    assert [m["turn"] for m in models] == [1, 2]
    assert models[0]["model"] == "openai:gpt-4o-mini" and models[0]["tool_calls"] == ["lookup"]
    assert models[0]["usage"] == {"prompt_tokens": 10, "completion_tokens": 5}
    assert models[0]["priced"] is True and models[0]["cost_usd"] == pytest.approx(4.5e-6)
    assert models[0]["latency_s"] >= 0 and models[1]["tool_calls"] == []


async def test_a_retried_run_replays_its_journal_without_calling_the_model_again(app: rw.App) -> None:
    """The tool fails once (not journaled); the run's retry executes the agent again from
    the top: the first model request comes from the journal, not the server."""
    made: list[str] = []
    with ScriptedOpenAI(ask_tools_then_report(("flaky", {}))) as server:
        agent = Agent(model_for(server), name="flaky_agent")

        @agent.tool_plain
        def flaky() -> str:
            """Fails the first time."""
            made.append("flaky")
            if len(made) == 1:
                raise RuntimeError("a blip")
            return "fine"

        task = RunwrightAgent(agent).register(app, retries=1, backoff=FAST)
        async with running_worker(app):
            handle = await app.submit(task, prompt="go")
            assert json.loads(await handle.result(timeout_s=30)) == {"c1": "fine"}
    assert made == ["flaky", "flaky"]
    assert len(server.requests) == 2, "the first model request was replayed from the journal"


# -- deliveries -----------------------------------------------------------------------------

async def test_an_at_most_once_call_started_but_not_recorded_is_never_made_again(app: rw.App) -> None:
    """The call dies after its started mark (its exception is no final one, so nothing is
    recorded); the run's retry finds the mark: the tool is not called again and the model
    is told its outcome is unknown."""
    made: list[int] = []
    with ScriptedOpenAI(ask_tools_then_report(("refund", {"amount": 5}))) as server:
        agent = Agent(model_for(server), name="refunder")

        @agent.tool_plain
        def refund(amount: int) -> str:
            """Refund money."""
            made.append(amount)
            raise ConnectionError("the worker lost the far side mid-call")

        durable = RunwrightAgent(agent, tools={"refund": "at_most_once"})
        task = durable.register(app, retries=1, backoff=FAST)
        async with running_worker(app):
            handle = await app.submit(task, prompt="refund 5")
            answer = json.loads(await handle.result(timeout_s=30))
    assert made == [5], "never called again"
    assert json.loads(answer["c1"])["error"] == "ToolOutcomeUnknown"
    (refund_step,) = [s for s in await app.store.step_list(handle.id) if s.name == "tool:refund"]
    assert refund_step.status == "failed" and json.loads(refund_step.error or "")["type"] == "OutcomeUnknown"


async def test_an_idempotent_tool_gets_a_stable_key(app: rw.App) -> None:
    keys: list[str] = []
    with ScriptedOpenAI(ask_tools_then_report(("charge", {"amount": 7}))) as server:
        agent = Agent(model_for(server), name="charger")

        @agent.tool_plain
        def charge(amount: int) -> str:
            """Charge a card."""
            keys.append(idempotency_key())
            if len(keys) == 1:
                raise RuntimeError("a blip after the far side took the charge")
            return f"charged {amount}"

        task = RunwrightAgent(agent, tools={"charge": "idempotent"}).register(app, retries=1, backoff=FAST)
        async with running_worker(app):
            handle = await app.submit(task, prompt="charge 7")
            await handle.result(timeout_s=30)
    assert keys == [f"{handle.id}:1", f"{handle.id}:1"], "the same key on each execution: run_id:position"
    with pytest.raises(RuntimeError, match="idempotent"):
        idempotency_key()


def test_a_misconfigured_adapter_is_a_config_error() -> None:
    agent = Agent("test", name="x")
    with pytest.raises(ConfigError, match="delivery must be one of"):
        RunwrightAgent(agent, tools={"refund": "exactly_once"})
    with pytest.raises(ConfigError, match="name the agent"):
        RunwrightAgent(Agent("test"))
    with pytest.raises(ConfigError, match="max_turns"):
        RunwrightAgent(agent, max_turns=0)


async def test_mcp_tools_take_their_delivery_from_annotations_unless_named(app: rw.App) -> None:
    """A read-only MCP tool is idempotent (its call carries the key in `_meta`); one with
    no hints is at most once, unless the user names another delivery."""
    script = ask_tools_then_report(("lookup_order", {"order_id": "42"}),
                                   ("add_note", {"order_id": "42", "text": "hi"}))
    with ScriptedOpenAI(script) as server:
        agent = Agent(model_for(server), name="mcp_agent", toolsets=[MCPToolset(MCP_SERVER, id="orders")])
        task = RunwrightAgent(agent).register(app)
        async with running_worker(app):
            handle = await app.submit(task, prompt="note on 42")
            answer = json.loads(await handle.result(timeout_s=60))
    assert json.loads(answer["c1"])["key"] == f"{handle.id}:1", "the key reached the MCP server in _meta"
    assert answer["c2"] == "noted on 42: hi"
    assert await steps(app, handle.id) == ["model", "tool:lookup_order", "model", "tool:add_note", "model"]
    # Which delivery each call got, as chosen (the kills that tell them apart are process tests).
    from runwright.integrations.pydantic_ai._toolset import delivery_of

    tools = {}
    async with MCPToolset(MCP_SERVER, id="orders") as orders:
        tools = await orders.get_tools(_plain_context())
    session = type("S", (), {"deliveries": {}})()
    assert delivery_of(session, "lookup_order", tools["lookup_order"]) == "idempotent"  # type: ignore[arg-type]
    assert delivery_of(session, "add_note", tools["add_note"]) == "at_most_once"  # type: ignore[arg-type]
    session.deliveries = {"add_note": "at_least_once"}
    assert delivery_of(session, "add_note", tools["add_note"]) == "at_least_once"  # type: ignore[arg-type]
    collect_stdio_leftovers()


async def test_an_mcp_server_over_streamable_http_is_wrapped_the_same_way(app: rw.App) -> None:
    port = free_port()
    server_proc = subprocess.Popen([sys.executable, str(MCP_SERVER), "--http", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_until(lambda: _listening(port), "the MCP server listens")
        with ScriptedOpenAI(ask_tools_then_report(("lookup_order", {"order_id": "42"}))) as server:
            orders = MCPToolset(f"http://127.0.0.1:{port}/mcp", id="orders_http")
            task = RunwrightAgent(Agent(model_for(server), name="mcp_http", toolsets=[orders])).register(app)
            async with running_worker(app):
                handle = await app.submit(task, prompt="where is 42?")
                answer = json.loads(await handle.result(timeout_s=60))
    finally:
        server_proc.kill()
        server_proc.wait()
    assert json.loads(answer["c1"]) == {"status": "lost in transit", "amount_usd": 30,
                                        "key": f"{handle.id}:1"}
    assert await steps(app, handle.id) == ["model", "tool:lookup_order", "model"]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _plain_context() -> RunContext[None]:
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    return RunContext(deps=None, model=TestModel(), usage=RunUsage())


# -- streaming --------------------------------------------------------------------------------

async def test_a_streamed_run_sends_its_text_as_token_events(app: rw.App) -> None:
    text = "Your order shipped yesterday and arrives tomorrow. " * 3
    with ScriptedOpenAI(lambda body, index: Reply(content=text)) as server:
        durable = RunwrightAgent(Agent(model_for(server), name="streamer"))

        @app.task
        async def chat(ctx: rw.Context, prompt: str) -> str:
            async with durable.run_stream(prompt) as result:
                return str(await result.get_output())

        async with running_worker(app):
            handle = await app.submit(chat, prompt="where is it?")
            assert await handle.result(timeout_s=30) == text
    assert server.requests[0]["stream"] is True
    log = await events(app, handle.id)
    assert rw.TokenText(log).text == text
    tokens = [e for e in log if e.kind == "tokens"]
    assert tokens and {e.data["call"] for e in tokens} == {0} and tokens[0].data["turn"] == 1
    model = next(e for e in log if e.kind == "model")
    assert all(e.seq < model.seq for e in tokens)


async def test_an_event_stream_handler_sees_the_text_and_the_run_streams_tokens(app: rw.App) -> None:
    text = "Shipped; it arrives tomorrow."
    seen: list[str] = []
    with ScriptedOpenAI(lambda body, index: Reply(content=text)) as server:
        durable = RunwrightAgent(Agent(model_for(server), name="handled"))

        async def handler(ctx: RunContext[None], stream: Any) -> None:
            async for event in stream:
                if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    seen.append(event.delta.content_delta)
                elif isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    seen.append(event.part.content)

        @app.task
        async def chat(ctx: rw.Context, prompt: str) -> str:
            return str((await durable.run(prompt, event_stream_handler=handler)).output)

        async with running_worker(app):
            handle = await app.submit(chat, prompt="where is it?")
            assert await handle.result(timeout_s=30) == text
    assert "".join(seen) == text, "the handler got the text, from the journaled response"
    assert rw.TokenText(await events(app, handle.id)).text == text


# -- budgets ----------------------------------------------------------------------------------

async def test_the_runs_budget_bounds_cost_and_turns(app: rw.App) -> None:
    with ScriptedOpenAI(ask_tools_then_report(("lookup", {"order": "A1"}))) as server:
        agent = Agent(model_for(server), name="spender")

        @agent.tool_plain
        def lookup(order: str) -> str:
            """Look an order up."""
            return "shipped"

        task = RunwrightAgent(agent).register(app, retries=0)
        async with running_worker(app):
            costly = await app.submit(task, prompt="a", budget=rw.Budget(max_cost_usd=5e-6))
            long = await app.submit(task, prompt="b", budget=rw.Budget(max_turns=1))
            for handle in (costly, long):
                with pytest.raises(rw.RunFailed):
                    await handle.result(timeout_s=30)
    ran = await costly.refresh()
    assert ran.state is rw.RunState.FAILED and "max_cost_usd" in (ran.error or "")
    ran = await long.refresh()
    assert ran.state is rw.RunState.FAILED and "max_turns=1" in (ran.error or "")


# -- deps, structured output, message history ----------------------------------------------------

class Order(BaseModel):
    order_id: str
    status: str


async def test_deps_structured_output_and_message_history_behave_as_in_pydantic_ai(app: rw.App) -> None:
    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call("status_of", {"order": "42"}, "c1")])
        return Reply(tool_calls=[call("final_result", {"order_id": "42", "status": results["c1"]}, "c2")])

    with ScriptedOpenAI(script) as server:
        agent = Agent(model_for(server), name="typed", deps_type=dict, output_type=Order)

        @agent.tool
        def status_of(ctx: RunContext[dict], order: str) -> str:
            """An order's status, as the user's shop knows it."""
            return f"{ctx.deps['shop']}: {order} shipped"

        durable = RunwrightAgent(agent)
        typed = durable.register(app, deps=lambda ctx: {"shop": f"shop-{ctx.run_id}"})

        @app.task
        async def with_history(ctx: rw.Context, prompt: str) -> dict[str, Any]:
            earlier = [ModelRequest(parts=[UserPromptPart("I am Ann")]),
                       ModelResponse(parts=[TextPart("Hi Ann")])]
            result = await durable.run(prompt, deps={"shop": "mine"}, message_history=earlier)
            assert isinstance(result.output, Order)
            return result.output.model_dump()

        async with running_worker(app):
            first = await app.submit(typed, prompt="status of 42?")
            assert await first.result(timeout_s=30) == {"order_id": "42",
                                                         "status": f"shop-{first.id}: 42 shipped"}
            second = await app.submit(with_history, prompt="and now?")
            assert await second.result(timeout_s=30) == {"order_id": "42", "status": "mine: 42 shipped"}
    assert user_messages(server.requests[-1]) == ["I am Ann", "and now?"]
    assert [m["role"] for m in server.requests[-1]["messages"]][:2] == ["user", "assistant"]


async def test_outside_a_task_the_agent_runs_plainly(app: rw.App) -> None:
    with ScriptedOpenAI(lambda body, index: Reply(content="plain")) as server:
        durable = RunwrightAgent(Agent(model_for(server), name="plain"))
        result = await durable.run("hi")
    assert result.output == "plain" and len(server.requests) == 1


# -- threads ----------------------------------------------------------------------------------------

async def test_a_thread_keeps_the_agents_history_across_runs(app: rw.App) -> None:
    with ScriptedOpenAI(lambda body, index: Reply(content=" | ".join(user_messages(body)))) as server:
        task = RunwrightAgent(Agent(model_for(server), name="chat")).register(app)
        async with running_worker(app):
            first = await app.submit(task, prompt="my name is Ann", thread="t1")
            assert await first.result(timeout_s=30) == "my name is Ann"
            second = await app.submit(task, prompt="what is my name?", thread="t1")
            assert await second.result(timeout_s=30) == "my name is Ann | what is my name?"
    history = await app.thread_history("t1")
    assert [m["kind"] for m in history] == ["request", "response", "request", "response"]
    assert history[3]["parts"][0]["content"] == "my name is Ann | what is my name?"


@pytest.mark.parametrize("mode", ["interrupt", "rollback"])
async def test_an_interrupt_between_tool_calls_leaves_a_history_pydantic_ai_accepts(
        app: rw.App, mode: str) -> None:
    """The model asks for two tools in one turn; a newer message interrupts while the first
    runs: it finishes and keeps its result, the second is never made and gets an
    "interrupted" result (interrupt), or the run's messages are dropped (rollback). The
    next run's request to the model has every tool call answered."""
    gate = asyncio.Event()
    made: list[str] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        if user_messages(body)[-1] == "do both":
            return Reply(tool_calls=[call("slow", {}, "s"), call("second", {}, "n")])
        return Reply(content="re: " + user_messages(body)[-1])

    with ScriptedOpenAI(script) as server:
        agent = Agent(model_for(server), name="busy")

        @agent.tool_plain
        async def slow() -> str:
            """Takes a while."""
            made.append("slow")
            await gate.wait()
            return "slow done"

        @agent.tool_plain
        def second() -> str:
            """Quick."""
            made.append("second")
            return "second done"

        task = RunwrightAgent(agent).register(app)
        async with running_worker(app) as worker:
            first = await app.submit(task, prompt="do both", thread="t")
            await wait_until(lambda: made, "the first tool call is running")
            newest = await app.submit(task, prompt="stop", thread="t", on_busy=mode)
            await wait_until(lambda: _interrupt_of(worker, first.id) == mode, "the run is told")
            gate.set()
            assert await newest.result(timeout_s=30) == "re: stop"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    assert made == ["slow"], "the started call finished; the other was never made"
    last = server.requests[-1]
    assert tool_calls_answered(last)
    if mode == "interrupt":
        assert tool_results(last) == {"s": "slow done", "n": json.dumps(
            {"error": "interrupted", "message": "not run: a newer message interrupted this turn"})}
        assert user_messages(last) == ["do both", "stop"]
    else:
        assert user_messages(last) == ["stop"] and tool_results(last) == {}


def _interrupt_of(worker: rw.Worker, run_id: int) -> str | None:
    control = worker.control_of(run_id)
    return control.interrupt if control is not None else None


async def test_an_interrupt_cuts_the_model_request_in_flight(app: rw.App) -> None:
    def script(body: dict[str, Any], index: int) -> Reply:
        if user_messages(body)[-1] == "think hard":
            return Reply(content="late", delay_s=SLOW_S)
        return Reply(content="quick: " + " | ".join(user_messages(body)))

    with ScriptedOpenAI(script) as server:
        task = RunwrightAgent(Agent(model_for(server), name="thinker")).register(app)
        async with running_worker(app):
            first = await app.submit(task, prompt="think hard", thread="t")
            await wait_until(lambda: server.requests, "the slow request is in flight")
            newest = await app.submit(task, prompt="never mind", thread="t", on_busy="interrupt")
            assert await newest.result(timeout_s=30) == "quick: think hard | never mind"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    assert await steps(app, first.id) == ["thread:history"], "the cut request left no journaled reply"
    history = await app.thread_history("t")
    assert [[p.get("content") for p in m["parts"]] for m in history] == [
        ["think hard"], ["never mind"], ["quick: think hard | never mind"]]


# -- approvals --------------------------------------------------------------------------------------

async def test_a_tool_that_requires_approval_parks_the_run_until_a_person_answers(app: rw.App) -> None:
    made: list[int] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call("transfer", {"amount": 5000}, "big")])
        return Reply(content=json.dumps(results))

    with ScriptedOpenAI(script) as server:
        agent = Agent(model_for(server), name="banker")

        @agent.tool_plain(requires_approval=True)
        def transfer(amount: int) -> str:
            """Send money."""
            made.append(amount)
            return f"sent {amount}"

        task = RunwrightAgent(agent).register(app)
        async with running_worker(app):
            approved = await app.submit(task, prompt="pay")
            (asked,) = await wait_until(lambda: app.questions(), "the transfer asks for approval")
            assert (asked.run_id, asked.kind, asked.body["tool"]) == (approved.id, "approval", "transfer")
            assert asked.body["arguments"] == {"amount": 5000}
            await wait_until(lambda: state_is(app, approved.id, rw.RunState.QUEUED), "the run parks")
            assert made == []
            await app.answer(approved.id, asked.id, {"approved": True}, by="ana")
            assert json.loads(await approved.result(timeout_s=30)) == {"big": "sent 5000"}

            denied = await app.submit(task, prompt="pay again")
            (asked,) = await wait_until(lambda: app.questions(), "the second transfer asks")
            await app.answer(denied.id, asked.id, {"approved": False, "reason": "too much"}, by="bo")
            refusal = json.loads(await denied.result(timeout_s=30))
    assert made == [5000], "the denied call was never made"
    assert refusal == {"big": "denied by bo: too much"}
    assert await steps(app, approved.id) == ["model", "approve:transfer", "tool:transfer", "model"]
    assert len(server.requests) == 4


async def test_the_next_message_to_a_thread_supersedes_a_waiting_approval(app: rw.App) -> None:
    """The person answers in the conversation instead: the waiting run ends interrupted and
    the next run's history has the waiting call answered "not run"."""
    made: list[int] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        if user_messages(body)[-1] == "pay eve":
            return Reply(tool_calls=[call("transfer", {"amount": 5000}, "t1")])
        return Reply(content="understood")

    with ScriptedOpenAI(script) as server:
        agent = Agent(model_for(server), name="banker2")

        @agent.tool_plain(requires_approval=True)
        def transfer(amount: int) -> str:
            """Send money."""
            made.append(amount)
            return "sent"

        task = RunwrightAgent(agent).register(app)
        async with running_worker(app):
            first = await app.submit(task, prompt="pay eve", thread="chat")
            await wait_until(lambda: app.questions(), "the transfer waits for approval")
            await wait_until(lambda: state_is(app, first.id, rw.RunState.QUEUED), "the run parks")
            second = await app.submit(task, prompt="no, do not pay", thread="chat", on_busy="reject")
            assert await second.result(timeout_s=30) == "understood"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    assert made == []
    last = server.requests[-1]
    assert [m["role"] for m in last["messages"]] == ["user", "assistant", "tool", "user"]
    assert tool_calls_answered(last) and "not run" in tool_results(last)["t1"]


async def test_runwrights_own_approval_option_asks_only_for_the_calls_it_names(app: rw.App) -> None:
    made: list[int] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call("transfer", {"amount": 5}, "small"),
                                     call("transfer", {"amount": 5000}, "large")])
        return Reply(content=json.dumps(results))

    with ScriptedOpenAI(script) as server:
        agent = Agent(model_for(server), name="banker3")

        @agent.tool_plain
        def transfer(amount: int) -> str:
            """Send money."""
            made.append(amount)
            return f"sent {amount}"

        durable = RunwrightAgent(agent, approval={"transfer": lambda args: args["amount"] > 100})
        task = durable.register(app)
        async with running_worker(app):
            handle = await app.submit(task, prompt="pay them")
            (asked,) = await wait_until(lambda: app.questions(), "the large transfer asks")
            assert made == [5] and asked.body["arguments"] == {"amount": 5000}
            await app.answer(handle.id, asked.id, {"approved": False, "reason": "over the limit"}, by="ana")
            answer = json.loads(await handle.result(timeout_s=30))
    assert made == [5]
    assert answer == {"small": "sent 5", "large": "denied by ana: over the limit"}
    assert await steps(app, handle.id) == ["model", "tool:transfer", "approve:transfer", "model"]
    with pytest.raises(ConfigError, match="approval of tool"):
        RunwrightAgent(agent, approval={"transfer": "yes"})  # type: ignore[dict-item]


def test_a_thread_history_with_unanswered_calls_gets_a_result_for_each() -> None:
    """What a run that ended mid-turn left (a call with no result) is answered "not run",
    right where the provider expects it; answered calls are left as they are."""
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    from runwright.integrations.pydantic_ai._session import NOT_RUN, answer_dangling_calls

    asked = ModelResponse(parts=[ToolCallPart("a", {}, tool_call_id="1"),
                                 ToolCallPart("b", {}, tool_call_id="2")])
    one_answer = ModelRequest(parts=[ToolReturnPart("a", "done", tool_call_id="1")])
    user = ModelRequest(parts=[UserPromptPart("next")])
    fixed = answer_dangling_calls([asked, one_answer, user])
    assert fixed[:2] == [asked, one_answer] and fixed[3] is user
    (not_run,) = fixed[2].parts
    assert isinstance(not_run, ToolReturnPart)
    assert (not_run.tool_name, not_run.tool_call_id, not_run.content) == ("b", "2", NOT_RUN)
    unanswered = answer_dangling_calls([asked, user])
    assert [p.tool_call_id for p in unanswered[1].parts] == ["1", "2"] and unanswered[2] is user
    assert answer_dangling_calls([asked, one_answer, fixed[2]]) == [asked, one_answer, fixed[2]]
