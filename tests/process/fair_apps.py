"""The app that worker subprocesses load as `tests.process.fair_apps:app` in the fair
shares test (test_fair_shares_tenants.py): one task whose runs take turns per tenant, with
no concurrency limit, so nothing but fairness keeps a big tenant's backlog from going
first. Its own module: the workers of other tests do not make fair claims."""

from __future__ import annotations

import asyncio

import runwright as rw

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()

RUN_S = 0.02  # a run's length: 32 slots drain a backlog of a few thousand in seconds


@app.task(retries=0, fair=rw.Fair(key="{tenant}", name="tenant-share"))
async def shared(n: int) -> None:
    await asyncio.sleep(RUN_S)
