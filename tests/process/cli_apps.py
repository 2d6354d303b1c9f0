"""The app that `runwright` subprocesses load as `tests.process.cli_apps:app` in the CLI tests."""

from __future__ import annotations

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
