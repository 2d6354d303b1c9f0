"""The app behind `runwright mcp tests.integrations.mcp_face_app:app` in the tests, and its
workers: a task that answers at once, one that asks a person, one that runs until cancelled,
one that fails."""

from __future__ import annotations

import asyncio

import runwright as rw

# RUNWRIGHT_URL is set by `--url` before this module is imported.
app = rw.App()


@app.task
async def double(n: int) -> int:
    return 2 * n


@app.task
async def greet(ctx: rw.Context) -> str:
    name = await ctx.ask("Whom shall I greet?", schema=str)
    return f"hello {name}"


@app.task
async def crawl(ctx: rw.Context, pages: int = 1000) -> int:
    for page in range(pages):
        await ctx.step(f"page-{page}", asyncio.sleep, 0.05)
    return pages



@app.task(retries=0)
async def always_fails() -> str:
    raise RuntimeError("it never works")
