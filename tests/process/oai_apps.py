"""The app that OpenAI Agents SDK worker subprocesses load as `tests.process.oai_apps:app`.

One SDK agent, `clerk`, registered with runwright.integrations.openai_agents: the SDK's
chat-completions model on OPENAI_BASE_URL (the test's scripted server, see
agent_harness.py), and two tools that write the ledger of agent_apps.py (one line per
execution, so a test sees even the execution of a process it killed): `lookup`
(at-least-once) and `pay` (at-most-once, held on its first execution so that the test can
kill the worker inside it).
"""

from __future__ import annotations

import os

from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import runwright as rw
from runwright.integrations.openai_agents import register

from .agent_apps import gate_opened, hold_first_call, note

set_tracing_disabled(True)  # no network: the SDK's trace export stays off
app = rw.App()  # RUNWRIGHT_URL is set by `runwright worker --url`


@function_tool
async def lookup(order: str) -> str:
    """Look an order up."""
    note("lookup", order)
    return f"{order} is packed"


@function_tool
async def pay(amount: int) -> str:
    """Move money: must never happen twice."""
    note("pay")
    await hold_first_call("pay")
    return f"paid {amount}"


@function_tool(name_override="wait_gate")
async def wait_gate(name: str) -> str:
    """Wait until the test opens the gate."""
    return await gate_opened(name)


# No client retries: every request the model server records is one the agent made.
# The client reads OPENAI_BASE_URL as it is made; the test's own process, which imports this
# module for the task names only, has no key: any will do there.
client = AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY", "unused"), max_retries=0)
model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
clerk = Agent(name="clerk", instructions="Help with orders.", model=model, tools=[lookup, pay])
# retries=0: a failed attempt ends the run (a takeover after a lost worker is no attempt).
register(app, clerk, tools={"pay": "at_most_once"}, retries=0)
# An agent whose turn waits on a gate: a message steered to it mid-run (test_steering.py).
register(app, Agent(name="sdk_steerable", model=model, tools=[wait_gate]), retries=0)
