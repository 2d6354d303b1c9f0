"""The app that `runwright` subprocesses load as `tests.process.cli_apps:app` in the CLI tests."""

from __future__ import annotations

import datetime as dt

import pydantic

import runwright as rw

# RUNWRIGHT_URL is set by `runwright ... --url` before this module is imported.
app = rw.App()


@app.task(retries=0)
async def double(ctx: rw.Context, n: int) -> int:
    return 2 * n


def _inner_frame_of_explode(reason: str) -> None:
    raise ValueError(f"explode: {reason}")


@app.task(retries=0)
async def explode(ctx: rw.Context, reason: str) -> None:
    _inner_frame_of_explode(reason)


@app.task(retries=0)
async def ask(ctx: rw.Context, text: str) -> bool:
    """A question to a person: the run parks until it is answered."""
    answer: bool = await ctx.ask(text, schema=bool)
    return answer


class Order(pydantic.BaseModel):
    sku: str
    qty: int = 1
    due: dt.datetime


@app.task(retries=0)
async def price(ctx: rw.Context, order: Order, rate: float = 1.0) -> dict:
    """Says what it received: an Order (not a dict), whose `due` is a datetime (not text)."""
    return {"received": [type(order).__name__, type(order.due).__name__], "total": order.qty * rate,
            "weekday": order.due.strftime("%A")}
