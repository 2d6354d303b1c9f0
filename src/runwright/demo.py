"""The app that `runwright demo` runs: a job that takes a little while and leaves a trace.

Each start of a run appends `run_id fence pid` to a ledger file (one per process, in
RUNWRIGHT_DEMO_LEDGER), so the demo can show which runs were started again after their
worker was killed, and that each still finished exactly once.
"""

from __future__ import annotations

import asyncio
import os
import random

from .app import App
from .context import Context

__all__ = ["app", "demo_job"]

app = App()


@app.task(retries=2)
async def demo_job(ctx: Context, n: int, work_s: float = 0.2) -> int:
    ledger = os.environ.get("RUNWRIGHT_DEMO_LEDGER")
    if ledger:
        with open(os.path.join(ledger, f"{os.getpid()}.log"), "a") as out:
            out.write(f"{ctx.run_id} {ctx.fence} {os.getpid()}\n")
    await asyncio.sleep(work_s * random.uniform(0.5, 1.5))
    return n * n
