"""Unit-testing a user's own tasks and agents: in one process, in milliseconds, with a
clock that skips ahead over durable sleeps, timers and retry backoffs (Temporal's
time-skipping test environment does the same for workflows).

    app = rw.App("memory://")            # or RUNWRIGHT_URL=memory:// for an app of a module

    async def test_onboarding():
        async with runwright.testing.Env(app) as env:
            handle = await app.submit(onboard, "ada")
            assert await env.result(handle) == "welcome, ada"   # a 1-day ctx.sleep: ~ms
            assert "progress" in await env.event_kinds(handle)

The Env runs one worker of the app in this event loop, and whenever that worker is idle
(nothing running, nothing claimed) while a queued run is due later, moves the clock to
that run's due time: a sleep, a backoff or a timer ends at once, and the run sees the time
it waited for (`ctx.sleep(86400)` returns with a day gone by on the App's clock). Runs
waiting on something else (an answer, a child) are left to it.

An agent is tested the same way, with a `ScriptedModel` in place of its model: it replies
from a script (text, or tool calls), in order, and records every request it receives.

    model = ScriptedModel(call("weather", city="Paris"), "18 °C and sunny in Paris.")
    agent = app.agent("forecaster", model=model, tools=[weather])

    async def test_forecaster():
        async with runwright.testing.Env(app) as env:
            handle = await app.submit(agent, "Weather in Paris?")
            assert await env.result(handle) == "18 °C and sunny in Paris."
            assert [c.name for c in await env.tool_calls(handle)] == ["weather"]
            assert model.requests[1].tool_results == [("weather", "18 °C, sunny")]
"""

from ._env import Env, SkippingClock, ToolCall
from ._model import Call, ModelRequest, Reply, ScriptedModel, ScriptExhausted, call
from ._replay import ReplayOutcome, export_runs, replay

__all__ = ["Call", "Env", "ModelRequest", "ReplayOutcome", "Reply", "ScriptExhausted", "ScriptedModel",
           "SkippingClock", "ToolCall", "call", "export_runs", "replay"]
