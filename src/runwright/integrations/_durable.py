"""What every framework adapter needs to run another framework's agent as runwright runs its
own: the run's budget as model calls spend it (turns, cost, the deadline), the `model` event
of each call, the thread's history kept as JSON items appended as they are made, a person's
approval of a tool call, the result an at-most-once call of unknown outcome gets, and the
running run's Context for an adapter whose API is the framework's own (no `ctx` handed in).

Each piece is the one runwright's own loop uses (agents/_loop.py), taken apart so that an
adapter, whose loop is the framework's, can call it at its own model and tool calls.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Mapping

from ..agents._loop import Conversation, _check_deadline, ask_approval
from ..agents._models import DEFAULT_PRICES, Price
from ..core._payloads import load
from ..engine._context import current_context
from ..errors import BudgetExceeded
from ..store._params import ThreadMessagesParams
from ..tasks._budget import Budget

if TYPE_CHECKING:
    from ..engine._context import Context

__all__ = ["Spending", "ThreadLog", "ask_approval", "check_deadline", "current_context", "emit_model_event",
           "outcome_unknown", "prices_table"]


def check_deadline(ctx: Context) -> None:
    """BudgetExceeded once the run's deadline has passed (the rescuer ends it too)."""
    _check_deadline(ctx)


def prices_table(prices: Mapping[str, Price | tuple[float, float]] | None) -> dict[str, Price]:
    """runwright's price table (USD per million tokens) with the user's entries over it."""
    table = dict(DEFAULT_PRICES)
    for name, price in (prices or {}).items():
        table[name] = price if isinstance(price, Price) else Price(*price)
    return table


class Spending:
    """The run's budget as its model calls spend it. Counted from the journal's values on
    every replay, so a resumed run knows what it spent before the takeover."""

    def __init__(self, ctx: Context, prices: dict[str, Price], max_turns: int | None = None) -> None:
        self.ctx = ctx
        self.prices = prices
        self.budget = Budget.from_json(ctx.run.budget)
        self.max_turns = min(max_turns or math.inf, self.budget.max_turns or math.inf)
        self.turn = 0
        self.spent_usd = 0.0

    def next_turn(self) -> int:
        """Before a model call: its turn (1, 2, ...); BudgetExceeded past the deadline or
        the budget's max_turns."""
        check_deadline(self.ctx)
        if self.turn + 1 > self.max_turns:
            raise BudgetExceeded(f"budget exceeded: max_turns={int(self.max_turns)} model calls "
                                 f"without a final answer")
        self.turn += 1
        return self.turn

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> tuple[float, bool]:
        """(cost in USD, whether the model is in the price table)."""
        price = self.prices.get(model) or self.prices.get(model.partition(":")[2])
        return (price.cost(prompt_tokens, completion_tokens), True) if price else (0.0, False)

    def spend(self, cost_usd: float) -> None:
        """After a model call: BudgetExceeded once the run spent more than max_cost_usd."""
        self.spent_usd += cost_usd
        limit = self.budget.max_cost_usd
        if limit is not None and self.spent_usd > limit:
            raise BudgetExceeded(f"budget exceeded: spent ${self.spent_usd:.6f} of "
                                 f"max_cost_usd=${limit} after {self.turn} model calls")


async def emit_model_event(ctx: Context, *, turn: int, model: str, prompt_tokens: int,
                           completion_tokens: int, cost_usd: float, priced: bool,
                           latency_s: float | None, tool_calls: list[str]) -> None:
    """The `model` event of one call, as runwright's own agents emit it."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    await ctx.emit("model", {"turn": turn, "model": model, "usage": usage,
                             "cost_usd": cost_usd, "priced": priced, "latency_s": latency_s,
                             "tool_calls": tool_calls})


class ThreadLog:
    """A run's part of its thread: JSON items appended as they are made (fenced, under
    their index in this run, so a replayed append is a no-op), and the earlier runs'
    items, read once and journaled (a replay sees the history the run started from)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.thread = ctx.run.thread
        self._conversation = Conversation(ctx)

    @property
    def added(self) -> int:
        return self._conversation.added

    async def history(self) -> list[Any]:
        if self.thread is None:
            return []
        return list(await self.ctx.step("thread:history", _history, self.ctx, self.thread))

    async def add(self, item: Any) -> None:
        await self._conversation.add(item)
        self._conversation.messages.clear()  # the items live in the thread, not twice in memory


async def _history(ctx: Context, thread: str) -> list[Any]:
    rows = await ctx.runtime.store.thread_messages(ThreadMessagesParams(
        thread, tenant=ctx.run.tenant, before_run=ctx.run_id))
    return [load(item) for _, _, item in rows]


def outcome_unknown(name: str) -> str:
    """What the model is told of an at-most-once call started by a worker that died (the
    words of runwright's own loop)."""
    return json.dumps({"error": "ToolOutcomeUnknown",
                       "message": f"the call to {name!r} was started but its outcome is unknown "
                                  f"(the worker stopped mid-call); it was not repeated because "
                                  f"the tool is at-most-once. Check before calling it again."})
