"""runwright.testing for agents: a ScriptedModel plugs into `app.agent` where a real model
does, replies from its script in order and keeps every request; Env reads the run's tool
calls, steps and events back; a durable wait between turns takes no wall time."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

import runwright as rw
from runwright.testing import Env, ScriptedModel, ToolCall, call

HOUR_S = 3600.0


def _app(model: ScriptedModel, **agent_options) -> tuple[rw.App, list[str]]:
    """An app with a `weather` tool (which counts its calls) and a `forecaster` agent."""
    app = rw.App("memory://")
    called: list[str] = []

    @app.tool
    def weather(city: str) -> str:
        """The weather now.

        Args:
            city: the city's name
        """
        called.append(city)
        return f"18 °C, sunny in {city}"

    app.agent("forecaster", model=model, tools=[weather], instructions="Answer briefly.",
              **agent_options)
    return app, called


async def test_an_agent_calls_its_tool_once_and_answers_with_the_models_final_text():
    model = ScriptedModel(call("weather", city="Paris"), "It is 18 °C and sunny in Paris.")
    app, called = _app(model)
    async with Env(app) as env:
        handle = await app.submit("forecaster", "Weather in Paris?")
        assert await env.result(handle) == "It is 18 °C and sunny in Paris."
        await env.assert_steps(handle, ["model", "tool:weather", "model"])
        with pytest.raises(AssertionError, match=r"journaled the steps \['model', 'tool:weather', 'model'\]"):
            await env.assert_steps(handle, ["model", "model"])
        tool_calls = await env.tool_calls(handle)
        model_events = await env.events(handle, kind="model")
        kinds = [event.kind for event in await env.events(handle)]
    assert called == ["Paris"]  # the tool ran once
    assert tool_calls == [ToolCall("weather", {"city": "Paris"}, "18 °C, sunny in Paris")]
    assert [event.data["tool_calls"] for event in model_events] == [["weather"], []]
    assert kinds[-1] == "succeeded" and kinds.count("model") == 2
    # What the model was sent: the tool offered each time, and its result the second time.
    first, second = model.requests
    assert first.tool_names == second.tool_names == ["weather"]
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert first.tool_results == []
    assert second.tool_results == [("weather", "18 °C, sunny in Paris")]
    assert second.messages[-2]["tool_calls"][0]["function"]["name"] == "weather"
    assert model.remaining == 0


async def test_an_agent_that_asks_for_one_reply_too_many_fails_on_its_model_step_without_retry():
    model = ScriptedModel(call("weather", city="Oslo"))  # no final answer scripted
    app, called = _app(model, retries=3)
    async with Env(app) as env:
        handle = await app.submit("forecaster", "Weather in Oslo?")
        with pytest.raises(rw.RunFailed) as failed:
            await env.result(handle)
        steps = await env.steps(handle)
    message = str(failed.value)
    assert "step 'model'" in message and "ScriptExhausted" in message, message
    assert "asked for reply 2, but the script has 1" in message, message
    assert "18 °C, sunny in Oslo" in message, message  # what the agent had just been told
    assert called == ["Oslo"]
    assert len(model.requests) == 2  # final: the run's three retries did not ask again
    assert [name for name, _ in steps] == ["model", "tool:weather"]


async def test_a_durable_agent_waits_an_hour_for_its_models_quota_in_well_under_a_second():
    """One model call an hour: the second turn's call parks the run for an hour; the clock
    skips it, and the run resumes by replay (the first turn and the tool not made again)."""
    model = ScriptedModel(call("weather", city="Lima"), "Sunny in Lima.", spec="scripted:hourly")
    app, called = _app(model)
    app.rate_limit(model.spec, requests_per_min=1 / 60, burst_s=HOUR_S)  # one at once, one an hour
    began = time.monotonic()
    async with Env(app) as env:
        handle = await app.submit("forecaster", "Weather in Lima?")
        result = await env.result(handle, timeout_s=30)
        await env.assert_steps(handle, ["model", "tool:weather", "model"])
        kinds = [event.kind for event in await env.events(handle)]
    wall_s = time.monotonic() - began
    assert result == "Sunny in Lima."
    assert env.clock.skipped_s >= 0.9 * HOUR_S  # the wait for the quota, on the App's clock
    assert wall_s < 1.0, f"took {wall_s:.2f} s of wall time"
    assert kinds.count("parked") == 1 and kinds.count("started") == 2  # it parked, then resumed
    assert called == ["Lima"]
    assert len(model.requests) == 2


async def test_parallel_calls_and_a_call_of_an_unknown_tool_each_get_their_result_in_order():
    model = ScriptedModel(
        [call("weather", city="Rome"), call("forecast", days=3), call("weather", city="Bern")],
        "Rome and Bern: sunny.")
    app, called = _app(model, stream=True)
    async with Env(app) as env:
        handle = await app.submit("forecaster", "Rome and Bern?")
        assert await env.result(handle) == "Rome and Bern: sunny."
        tool_calls = await env.tool_calls(handle)
        streamed = "".join(event.data["text"] for event in await env.events(handle, kind="tokens"))
    assert called == ["Rome", "Bern"]
    assert [(c.name, c.arguments) for c in tool_calls] == [
        ("weather", {"city": "Rome"}), ("forecast", {"days": 3}), ("weather", {"city": "Bern"})]
    assert tool_calls[0].result == "18 °C, sunny in Rome" and tool_calls[2].result == "18 °C, sunny in Bern"
    assert "unknown tool 'forecast'" in (tool_calls[1].result or "")
    assert [name for name, _ in model.requests[1].tool_results] == ["weather", "forecast", "weather"]
    assert streamed == "Rome and Bern: sunny."  # a streaming agent gets the text as tokens


async def test_a_call_a_person_refuses_is_listed_as_never_made():
    model = ScriptedModel([call("alert", text="storm"), call("weather", city="Nice")], "No alert sent.")
    app, called = _app(model)
    alerts: list[str] = []

    @app.tool(approval=True)
    def alert(text: str) -> str:
        """Alert everyone."""
        alerts.append(text)
        return "sent"

    app.agent("alerter", model=model, tools=[alert, "weather"])
    async with Env(app) as env:
        handle = await app.submit("alerter", "Storm coming?")

        async def refuse() -> None:
            while not (pending := await app.questions(handle.id)):
                await asyncio.sleep(0.01)
            await app.answer(handle.id, pending[0].id, {"approved": False, "reason": "not now"}, by="ops")

        refusing = asyncio.create_task(refuse())
        assert await env.result(handle, timeout_s=10) == "No alert sent."
        await refusing
        await env.assert_steps(handle, ["model", "approve:alert", "tool:weather", "model"])
        tool_calls = await env.tool_calls(handle)
    assert alerts == [] and called == ["Nice"]
    assert tool_calls == [ToolCall("alert", {"text": "storm"}, None),
                          ToolCall("weather", {"city": "Nice"}, "18 °C, sunny in Nice")]
    assert "denied by ops: not now" in model.requests[1].tool_results[0][1]


def test_a_script_with_something_other_than_a_reply_is_refused_at_once():
    with pytest.raises(rw.ConfigError, match="reply 2 of the script is 42"):
        ScriptedModel("hello", 42)  # type: ignore[arg-type]
    with pytest.raises(rw.ConfigError, match="reply 1"):
        ScriptedModel([])


README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_examples_of_runwright_testing() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    # The unit tests a user writes with it (other sections use it in whole programs).
    return [block for block in blocks if "from runwright.testing import" in block and "def test_" in block]


async def test_the_readmes_examples_of_runwright_testing_run_and_pass():
    examples = _readme_examples_of_runwright_testing()
    assert len(examples) == 2  # the task's and the agent's
    for example in examples:
        namespace: dict = {"__name__": "readme_example"}
        exec(compile(example, str(README), "exec"), namespace)  # noqa: S102 (our own README)
        tests = [value for name, value in namespace.items() if name.startswith("test_")]
        assert len(tests) == 1
        await tests[0]()


async def test_a_tool_call_whose_arguments_do_not_fit_is_answered_as_an_error_and_the_run_goes_on():
    """The model's arguments are checked against the tool's hints as a task's are at
    submission (pydantic, lax): what fits is coerced ("3" -> 3), what does not comes back
    to the model as the call's error result, naming each argument, and the tool never runs."""
    app = rw.App("memory://")
    made: list[tuple[str, int]] = []

    @app.tool
    def forecast(city: str, days: int = 1) -> str:
        """The forecast for `days` days."""
        made.append((city, days))
        return f"{days} days of sun in {city}"

    model = ScriptedModel(call("forecast", city="Oslo", days="three", hours=2),
                          call("forecast", city="Oslo", days="3"), "Sun for three days in Oslo.")
    app.agent("forecaster", model=model, tools=[forecast])
    async with Env(app) as env:
        handle = await app.submit("forecaster", "Weather in Oslo?")
        assert await env.result(handle) == "Sun for three days in Oslo."
        tool_calls = await env.tool_calls(handle)
        run = (await app.get(handle.id)).run
    refusal = ("tool 'forecast': argument 'days': Input should be a valid integer, unable to parse string "
               "as an integer (got 'three'); argument 'hours': Extra inputs are not permitted")
    assert made == [("Oslo", 3)]  # the bad call was never made; the good one got an int
    assert model.requests[1].tool_results == [("forecast", json.dumps({"error": refusal}))]  # what it saw
    assert model.requests[2].tool_results[-1] == ("forecast", "3 days of sun in Oslo")
    assert [c.result for c in tool_calls] == [json.dumps({"error": refusal}), "3 days of sun in Oslo"]
    assert run.state is rw.RunState.SUCCEEDED and run.attempt == 1
