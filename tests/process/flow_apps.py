"""The app that `runwright` subprocesses load as `tests.process.flow_apps:app` in the flow
control tests: one task of each kind of flow control, keyed by its `order` argument (a
batched task's submissions give it as one item's argument)."""

from __future__ import annotations

import runwright as rw

# RUNWRIGHT_URL is set by `runwright ... --url` before this module is imported.
app = rw.App()


@app.task(singleton=rw.Singleton(key="{args.order}", on_conflict="replace"))
async def quote(order: str, n: int = 0) -> None:
    return None


@app.task(singleton=rw.Singleton(key="{args.order}"))
async def charge(order: str, n: int = 0) -> None:
    return None


@app.task(debounce=rw.Debounce(key="{args.order}", window_s=3600))
async def reindex(order: str, n: int = 0) -> None:
    return None


@app.task(throttle=rw.Throttle(key="{args.order}", per_s=3600))
async def digest(order: str, n: int = 0) -> None:
    return None


@app.task(batch=rw.Batch(key="{args.order}", max_items=10, max_wait_s=3600))
async def collect(items: list[dict]) -> None:
    return None
