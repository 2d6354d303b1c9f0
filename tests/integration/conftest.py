"""An App on each backend, and an in-process worker to go with it."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

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
