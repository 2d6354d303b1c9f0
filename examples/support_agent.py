"""A support agent: tools with each delivery guarantee, a conversation on a thread, a budget.

Run it against any OpenAI-compatible endpoint:

    export OPENAI_API_KEY=...                       # or OPENAI_BASE_URL=http://127.0.0.1:11434/v1 (Ollama)
    runwright worker examples.support_agent:app &   # executes the agent
    python -m examples.support_agent "Where is order 42? Refund it if it is lost."

Kill the worker mid-conversation and start another: the conversation resumes where it
stood; a refund that was started is never made twice (the model is told its outcome is
unknown instead), and the confirmation e-mail carries a stable idempotency key.
"""

from __future__ import annotations

import asyncio
import sys

import runwright as rw

app = rw.App()
ORDERS = {42: {"status": "lost in transit", "amount_usd": 30}}


@app.tool
def lookup_order(order_id: int) -> dict:
    """Look up an order.

    Args:
        order_id: the order's number
    """
    return ORDERS.get(order_id, {"status": "unknown order"})


@app.tool(delivery="at_most_once")
def refund(order_id: int, amount_usd: float) -> str:
    """Refund an order. Never call it twice for one order.

    Args:
        order_id: the order's number
        amount_usd: how much to give back
    """
    return f"refunded ${amount_usd:.2f} on order {order_id}"


@app.tool(delivery="idempotent")
def send_email(to: str, body: str, idempotency_key: str) -> str:
    """E-mail the customer.

    Args:
        to: the address
        body: the text
    """
    # A real mail API would receive `idempotency_key` and drop a repeat of it.
    return f"sent to {to} (key {idempotency_key})"


support = app.agent(
    "support",
    model="openai:gpt-4o-mini",
    tools=[lookup_order, refund, send_email],
    instructions="You are a support agent. Be brief. Customer e-mail: ann@example.com.",
    max_turns=8,
)


async def main(question: str) -> None:
    async with app:
        run = await app.submit(support, input=question, thread="customer-ann", on_busy="enqueue",
                               budget=rw.Budget(max_cost_usd=0.05, deadline_s=300))
        async for event in run.events():
            print(f"{event.seq:>3} {event.kind:<12} {event.data}")
        print(await run.result())


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Where is my order 42?"))
