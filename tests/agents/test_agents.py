"""The agent loop end to end, in one process, on every backend."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import runwright as rw
from runwright.agents import ModelClient
from runwright.engine import _crashpoints as crashpoints
from runwright.store._params import EventListParams

from ..integration.conftest import running_worker
from .scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results

FAST = rw.Backoff(base_s=0.01, factor=2, cap_s=0.05)


def model_at(server: ScriptedOpenAI, name: str = "gpt-4o-mini", **options) -> ModelClient:
    import os

    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ.setdefault("OPENAI_API_KEY", "test-key")
    options.setdefault("backoff", FAST)
    return ModelClient(f"openai:{name}", **options)


def two_tools_then_answer(body, index) -> Reply:
    if last_role(body) == "user":
        return Reply(tool_calls=[call("add", {"a": 2, "b": 3}, "c1"), call("shout", {"text": "hi"}, "c2")],
                     usage=(100, 20))
    results = tool_results(body)
    return Reply(content=f"add={results['c1']} shout={results['c2']}", usage=(200, 10))


def register_tools(app: rw.App, seen: list) -> None:
    @app.tool
    async def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        seen.append(("add", a, b))
        return a + b

    @app.tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        seen.append(("shout", text))
        return text.upper()


async def test_parallel_tool_calls_then_an_answer_with_usage_and_cost(app):
    seen: list = []
    register_tools(app, seen)
    with ScriptedOpenAI(two_tools_then_answer) as server:
        app.agent("helper", model=model_at(server), tools=["add", "shout"], instructions="Be brief.")
        async with running_worker(app):
            handle = await app.submit("helper", input="do it")
            assert await handle.result(timeout_s=30) == "add=5 shout=HI"
    assert seen == [("add", 2, 3), ("shout", "hi")]
    first, second = server.requests
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in first["tools"]} == {"add", "shout"}
    add_schema = next(t for t in first["tools"] if t["function"]["name"] == "add")["function"]
    assert add_schema["description"] == "Add two integers."
    assert add_schema["parameters"]["properties"]["a"]["description"] == "the first"
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    events = await app.store.event_list(EventListParams(handle.id))
    models = [e.data for e in events if e.kind == "model"]
    assert [m["usage"] for m in models] == [{"prompt_tokens": 100, "completion_tokens": 20},
                                            {"prompt_tokens": 200, "completion_tokens": 10}]
    assert models[0]["cost_usd"] == pytest.approx((100 * 0.15 + 20 * 0.60) / 1e6)
    steps = [s.name for s in await app.store.step_list(handle.id)]
    assert steps == ["model", "tool:add", "tool:shout", "model"]


async def test_bad_calls_become_error_results_the_model_sees(app):
    seen: list = []
    register_tools(app, seen)

    def script(body, index) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("add", {"a": "two"}, "bad"), call("nope", {}, "unknown")])
        return Reply(content=json.dumps(tool_results(body)))

    with ScriptedOpenAI(script) as server:
        app.agent("helper", model=model_at(server), tools=["add"])
        async with running_worker(app):
            answer = json.loads(await (await app.submit("helper", input="x")).result(timeout_s=30))
    assert seen == []
    assert json.loads(answer["bad"]) == {"error": (
        "tool 'add': argument 'a': Input should be a valid integer, unable to parse string as an integer "
        "(got 'two'); argument 'b': Field required")}
    assert "unknown tool 'nope'" in answer["unknown"]


async def test_a_tool_that_raises_reports_the_error_to_the_model(app):
    @app.tool
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    def script(body, index) -> Reply:
        if last_role(body) == "user":
            return Reply(tool_calls=[call("divide", {"a": 1, "b": 0}, "d")])
        return Reply(content=tool_results(body)["d"])

    with ScriptedOpenAI(script) as server:
        app.agent("calc", model=model_at(server), tools=[divide])
        async with running_worker(app):
            answer = await (await app.submit("calc", input="x")).result(timeout_s=30)
    assert json.loads(answer) == {"error": "ZeroDivisionError: float division by zero"}


async def test_transient_provider_errors_are_retried_honouring_retry_after(app):
    def script(body, index) -> Reply:
        return [Reply(status=429, retry_after="0.3"), Reply(status=503), Reply(content="ok")][min(index, 2)]

    with ScriptedOpenAI(script) as server:
        app.agent("patient", model=model_at(server))
        async with running_worker(app):
            started = time.monotonic()
            assert await (await app.submit("patient", input="x")).result(timeout_s=30) == "ok"
            waited = time.monotonic() - started
    assert len(server.requests) == 3
    assert waited >= 0.3  # the Retry-After was honoured (a floor, not a speed assertion)


async def test_a_4xx_is_a_clear_final_failure_and_persistent_5xx_exhausts_retries(app):
    def script(body, index) -> Reply:
        if body["model"] == "refused":
            return Reply(status=400, error="context length exceeded")
        return Reply(status=500)

    with ScriptedOpenAI(script) as server:
        app.agent("refused", model=model_at(server, "refused"), retries=3, backoff=FAST)
        app.agent("broken", model=model_at(server, "broken", max_retries=1), retries=1, backoff=FAST)
        async with running_worker(app):
            with pytest.raises(rw.RunFailed, match="ended failed: StepFailed: step 'model' .* ModelError: "
                                                   "openai:refused refused the request: HTTP 400: "
                                                   "context length exceeded"):
                await (await app.submit("refused", input="x")).result(timeout_s=30)
            with pytest.raises(rw.RunFailed, match="ended dead: ModelUnavailable: openai:broken: HTTP 500"):
                await (await app.submit("broken", input="x")).result(timeout_s=30)
    by_model = [r["model"] for r in server.requests]
    assert by_model.count("refused") == 1  # a 400 is not retried
    assert by_model.count("broken") == 4  # 2 calls per attempt (1 retry) x 2 attempts


async def test_streamed_tokens_are_published_as_coalesced_events(app):
    text = "The quick brown fox jumps over the lazy dog. " * 12

    with ScriptedOpenAI(lambda body, index: Reply(content=text)) as server:
        app.agent("talker", model=model_at(server), stream=True)
        async with running_worker(app):
            handle = await app.submit("talker", input="x")
            assert await handle.result(timeout_s=30) == text
    events = await app.store.event_list(EventListParams(handle.id))
    tokens = [e.data["text"] for e in events if e.kind == "tokens"]
    assert "".join(tokens) == text
    assert 1 <= len(tokens) < len(text) / 4  # coalesced: fewer events than streamed chunks
    assert server.requests[0]["stream"] is True


async def test_budgets_end_the_run_failed_with_the_reason(app):
    def loop_forever(body, index) -> Reply:
        return Reply(tool_calls=[call("add", {"a": 1, "b": 1}, f"c{index}")], usage=(1_000_000, 0))

    register_tools(app, [])
    with ScriptedOpenAI(loop_forever) as server:
        app.agent("looper", model=model_at(server), tools=["add"], max_turns=50)
        async with running_worker(app):
            costly = await app.submit("looper", input="x", budget=rw.Budget(max_cost_usd=0.2))
            with pytest.raises(rw.RunFailed, match=r"BudgetExceeded: budget exceeded: spent \$0.30"):
                await costly.result(timeout_s=30)
            turns = await app.submit("looper", input="x", budget=rw.Budget(max_turns=3))
            with pytest.raises(rw.RunFailed, match="max_turns=3 model calls without a final answer"):
                await turns.result(timeout_s=30)
    assert len([e for e in await app.store.event_list(EventListParams(turns.id)) if e.kind == "model"]) == 3


async def test_a_deadline_is_enforced_even_with_no_worker_for_the_run(app, store_url):
    with ScriptedOpenAI(lambda body, index: Reply(content="late")) as server:
        app.agent("slow", model=model_at(server))
        handle = await app.submit("slow", input="x", budget=rw.Budget(deadline_s=0.3))
        # Only a worker of another app runs: none can claim the agent's run, but its
        # rescuer still ends it when the deadline passes.
        other = rw.App(store_url)

        @other.task
        async def unrelated(ctx: rw.Context) -> None: ...

        async with other, running_worker(other, rescue_interval_s=0.05):
            with pytest.raises(rw.RunFailed, match="ended failed: DeadlineExceeded"):
                await handle.result(timeout_s=30)
    assert server.requests == []


async def test_at_most_once_tools_are_never_made_twice_at_least_once_ones_are(app):
    calls = {"pay": 0, "note": 0, "keys": []}

    @app.tool(delivery="at_most_once")
    def pay(amount: int) -> str:
        """Move money."""
        calls["pay"] += 1
        return "paid"

    @app.tool(delivery="idempotent")
    def note(text: str, idempotency_key: str) -> str:
        """Record a note."""
        calls["note"] += 1
        calls["keys"].append(idempotency_key)
        return "noted"

    def script(body, index) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call("pay", {"amount": 5}, "p")])
        if "n" not in results:
            return Reply(tool_calls=[call("note", {"text": "x"}, "n")])
        return Reply(content=json.dumps(results))

    with ScriptedOpenAI(script) as server:
        app.agent("payer", model=model_at(server), tools=[pay, note], retries=3, backoff=FAST)
        # Both tools "crash" their attempt once: `pay` right after its started mark is
        # durable (before the call), `note` after its call but before its journal write.
        crashpoints.arm("step.after_started_mark:tool:pay", times=1)
        crashpoints.arm("step.after_side_effect:tool:note", times=1)
        try:
            async with running_worker(app):
                handle = await app.submit("payer", input="x")
                answer = json.loads(await handle.result(timeout_s=30))
        finally:
            crashpoints.disarm()
    assert calls["pay"] == 0  # started, then the attempt died: never made
    assert json.loads(answer["p"])["error"] == "ToolOutcomeUnknown"
    assert calls["note"] == 2  # at least once: made again after the crash ...
    assert calls["keys"][0] == calls["keys"][1] == f"{handle.id}:3"  # ... with the same key
    events = await app.store.event_list(EventListParams(handle.id))
    retries = [e.data["error"] for e in events if e.kind == "retrying"]
    assert len(retries) == 2 and all("CrashPointReached" in error for error in retries)


async def test_a_deadline_that_passed_while_no_worker_was_alive_is_never_run(app):
    with ScriptedOpenAI(lambda body, index: Reply(content="too late")) as server:
        app.agent("late", model=model_at(server))
        handle = await app.submit("late", input="x", budget=rw.Budget(deadline_s=0.2))
        while time.time() <= handle.run.deadline_at:  # no worker is alive meanwhile
            await asyncio.sleep(0.05)
        async with running_worker(app, rescue_interval_s=0.05):  # one that could run it
            with pytest.raises(rw.RunFailed, match="ended failed: DeadlineExceeded"):
                await handle.result(timeout_s=30)
    assert server.requests == []  # the model was never called
    assert [e.kind for e in await app.store.event_list(EventListParams(handle.id))] == ["submitted", "failed"]
