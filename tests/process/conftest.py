"""Fixtures of the process tests: a client App on a fresh store, and a fleet of workers
that is always reaped, whatever the test did to them."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

import runwright as rw

from .harness import WorkerFleet, client


@pytest.fixture
async def app(store_url: str) -> AsyncIterator[rw.App]:
    """A client on the test's store. Opening it creates the schema before any worker
    starts, so the workers do not all race to create it."""
    app = client(store_url)
    await app.open()
    yield app
    await app.close()


@pytest.fixture
def fleet(store_url: str, tmp_path: Path) -> Iterator[WorkerFleet]:
    fleet = WorkerFleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.kill_all()
        # Captured by pytest and shown only when the test failed.
        print(fleet.dump_logs())
