"""An OpenAI Agents SDK triage agent, durable on runwright: it looks the order up with an
MCP tool and hands off to a refunds specialist, whose `refund` tool is at-most-once.

Run it against any OpenAI-compatible endpoint (the model speaks chat completions):

    export OPENAI_API_KEY=...                              # or OPENAI_BASE_URL=... of a local server
    export OPENAI_AGENTS_DISABLE_TRACING=1                 # with no network: the SDK's traces stay home
    runwright worker examples.openai_agents_triage:app &   # executes the agents
    python -m examples.openai_agents_triage "Order 42 never came. Refund it."

Kill the worker mid-run and start another: the run resumes from its last completed model
or tool call; a refund that was started is never made twice (the specialist is told its
outcome is unknown instead). Follow the run: `agent_item` events name each message, tool
call, tool output and handoff; `model` events carry each call's usage and cost.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI

import runwright as rw
from runwright.integrations.openai_agents import register

app = rw.App()
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
# The SDK's chat-completions model on OPENAI_BASE_URL (else OpenAI's own endpoint); its
# connections close with the app.
client = AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY", "unset"))
model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
app.on_close(client.close)

order_desk = MCPServerStdio(name="order-desk", params={
    "command": sys.executable, "args": [str(Path(__file__).with_name("openai_agents_mcp_server.py"))]})


@function_tool
def refund(order_id: int, amount_usd: float) -> str:
    """Refund an order. Never call it twice for one order."""
    return f"refunded ${amount_usd:.2f} on order {order_id}"


refunds = Agent(name="refunds", model=model, tools=[refund],
                instructions="You refund orders that were lost. Confirm in one sentence.")
triage = Agent(name="triage", model=model, mcp_servers=[order_desk], handoffs=[refunds],
               instructions="Look the order up, then hand refund requests to the refunds agent.")

# The task `triage(input: str)`. `refund` moves money: at most once. The MCP tool's
# delivery comes from its annotations (read-only: idempotent).
task = register(app, triage, tools={"refund": "at_most_once"}, max_turns=8)


async def main(question: str) -> None:
    async with app:
        run = await app.submit(task, input=question, thread="customer-ann", on_busy="enqueue",
                               budget=rw.Budget(max_cost_usd=0.05, deadline_s=300))
        async for event in run.events():
            print(f"{event.seq:>3} {event.kind:<12} {event.data}")
        print(await run.result())


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Order 42 never came. Refund it."))
