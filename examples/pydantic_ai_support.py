"""A support agent written with Pydantic AI, made durable by runwright: an MCP server's
order lookup (read-only: called idempotently, with a stable key in the call's `_meta`),
an at-most-once refund, a conversation on a thread, a budget.

Run it against any OpenAI-compatible endpoint:

    export OPENAI_API_KEY=...                            # or OPENAI_BASE_URL=http://127.0.0.1:11434/v1
                                                         # (the chat-completions API: any compatible server)
    runwright worker examples.pydantic_ai_support:app &  # executes the agent
    python -m examples.pydantic_ai_support "Where is order 42? Refund it if it is lost."

Kill the worker mid-conversation and start another: the agent resumes from its last
completed model request or tool call, and a refund that was started is never made twice
(the model is told its outcome is unknown instead).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

import runwright as rw
from runwright.integrations.pydantic_ai import RunwrightAgent

app = rw.App()

orders = MCPToolset(Path(__file__).with_name("pydantic_ai_mcp_server.py"), id="orders")
agent = Agent("openai-chat:gpt-4o-mini", name="pyd_support", toolsets=[orders],
              instructions="You are a support agent. Be brief.")


@agent.tool_plain
def refund(order_id: str, amount_usd: float) -> str:
    """Refund an order. Never call it twice for one order.

    Args:
        order_id: the order's number
        amount_usd: how much to give back
    """
    return f"refunded ${amount_usd:.2f} on order {order_id}"


durable = RunwrightAgent(agent, tools={"refund": "at_most_once"}, max_turns=8)
support = durable.register(app)  # a task: support(prompt) -> the agent's output


async def main(question: str) -> None:
    async with app:
        run = await app.submit(support, prompt=question, thread="customer-ann", on_busy="enqueue",
                               budget=rw.Budget(max_cost_usd=0.05, deadline_s=300))
        async for event in run.events():
            print(f"{event.seq:>3} {event.kind:<12} {event.data}")
        print(await run.result())


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Where is my order 42?"))
