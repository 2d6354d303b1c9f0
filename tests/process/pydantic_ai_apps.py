"""The app that Pydantic AI worker subprocesses load as `tests.process.pydantic_ai_apps:app`.

One Pydantic AI agent, `pyd_orders`, made durable by RunwrightAgent, on Pydantic AI's own
OpenAI model pointed at the test's scripted server (OPENAI_BASE_URL). Its tools write the
ledger of agent_apps (one line per execution, flushed at once, so a SIGKILL loses none):
`prepare` (at least once) and `transfer` (at most once), which holds its first execution
(in any process) so that a test can kill the worker inside it.
"""

from __future__ import annotations

import os

from pydantic_ai import Agent

import runwright as rw
from runwright.integrations.pydantic_ai import RunwrightAgent

from ..integrations.pydantic_ai_helpers import model_for
from .agent_apps import gate_opened, hold_first_call, note

app = rw.App()

agent = Agent(model_for(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")), name="pyd_orders")


@agent.tool_plain
def prepare(order: str) -> str:
    """Get an order ready."""
    note("prepare", order)
    return f"prepared {order}"


@agent.tool_plain
async def transfer(order: str) -> str:
    """Send an order's money: must never happen twice."""
    note("transfer", order)
    if os.environ.get("HOLD_TRANSFER"):
        await hold_first_call("transfer")
    return f"transferred {order}"


durable = RunwrightAgent(agent, tools={"transfer": "at_most_once"})
# retries=0: a failed attempt ends the run, so a test sees it instead of a silent retry.
orders = durable.register(app, retries=0)

streamer = RunwrightAgent(Agent(model_for(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")),
                                name="pyd_streamer"))


@app.task(retries=0)
async def pyd_stream(ctx: rw.Context, prompt: str) -> str:
    """The agent's answer, streamed: its text goes out as `tokens` events."""
    async with streamer.run_stream(prompt) as result:
        return str(await result.get_output())


# An agent whose turn waits on a gate: a message steered to it mid-run (test_steering.py).
gated = Agent(model_for(os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")), name="pyd_steerable")


@gated.tool_plain(name="wait_gate")
async def wait_gate(name: str) -> str:
    """Wait until the test opens the gate."""
    return await gate_opened(name)


RunwrightAgent(gated).register(app, retries=0)
