"""An App on each backend, and an in-process worker to go with it."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

import pytest

import runwright as rw


@pytest.fixture
async def app(store_url: str) -> AsyncIterator[rw.App]:
    app = rw.App(store_url)
    try:
        await app.open()
    except rw.StoreError as exc:
        pytest.fail(f"backend {store_url} unreachable: {exc}")
    yield app
    await app.close()


@asynccontextmanager
async def running_worker(app: rw.App, **options) -> AsyncIterator[rw.Worker]:
    """A worker running in this event loop; stopped gracefully on exit."""
    options.setdefault("poll_s", 0.2)
    worker = app.worker(**options)
    started = asyncio.Event()
    task = asyncio.create_task(worker.run(ready=lambda _w: started.set()))
    await asyncio.wait([asyncio.create_task(started.wait()), task], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raise what stopped it
    try:
        yield worker
    finally:
        worker.stop()
        await task


async def assert_cuts_cost_a_long_run_no_takeover(app: rw.App, cut: Callable[[], Awaitable[object]],
                                                  cuts: int = 4) -> None:
    """Connections cut every 1.5 s (by `cut`, `cuts` times) while one run's step takes 4 s: a worker that
    reconnects is not a dead one, so its run is never taken over, its step runs once and
    its attempt is not counted again."""
    calls: list[float] = []

    async def slow() -> str:
        calls.append(time.monotonic())
        await asyncio.sleep(4)
        return "done"

    @app.task
    async def long(ctx: rw.Context) -> str:
        return str(await ctx.step("slow", slow))

    async with running_worker(app, concurrency=2):
        handle = await app.submit(long)
        async with asyncio.timeout(30):
            while not calls:
                await asyncio.sleep(0.01)
        for _ in range(cuts):
            await asyncio.sleep(1.5)
            await cut()
        assert await handle.result(timeout_s=60) == "done"
    run = await handle.refresh()
    assert len(calls) == 1 and run.recoveries == 0 and run.attempt == 1
    assert [e.kind for e in await app.events_page(handle.id)].count("started") == 1
