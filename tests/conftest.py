"""One store fixture over every backend: each scenario runs on each.

A backend that cannot be reached fails the test; it is never skipped, so a green run
means every backend was exercised.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import AsyncIterator, Iterator

import asyncpg
import pytest
import redis.asyncio

from runwright.store import Store, store_from_url

PG_BASE = os.environ.get("RUNWRIGHT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
# The shared Redis of the machine: every test uses a namespace of its own and deletes it.
REDIS_BASE = os.environ.get("RUNWRIGHT_TEST_REDIS", "redis://127.0.0.1:6379/0")
BACKENDS = ["sqlite", "postgres", "redis"]


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("RUNWRIGHT_LOG_LEVEL", "WARNING")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, tmp_path) -> Iterator[str]:
    """A URL to a fresh, empty store of `backend` (dropped afterwards)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'runwright.db'}"
        return
    if backend == "memory":  # named: a second store opened on the URL shares it
        yield f"memory://rw_test_{uuid.uuid4().hex[:12]}"
        return
    if backend == "redis":
        namespace = f"rw_test_{uuid.uuid4().hex[:12]}"
        yield f"{REDIS_BASE}?namespace={namespace}"
        asyncio.run(drop_redis_namespace(REDIS_BASE, namespace))
        return
    schema = f"rw_test_{uuid.uuid4().hex[:12]}"
    yield f"{PG_BASE}?schema={schema}"
    asyncio.run(_drop_schema(schema))


async def drop_redis_namespace(base: str, namespace: str) -> None:
    """Delete every key of one namespace (never the whole database: it is shared)."""
    client = redis.asyncio.Redis.from_url(base)
    try:
        batch = []
        async for key in client.scan_iter(match=f"rw:{{{namespace}}}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                await client.unlink(*batch)
                batch = []
        if batch:
            await client.unlink(*batch)
    finally:
        await client.aclose()


async def _drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open, migrated store of each backend."""
    store = store_from_url(store_url)
    try:
        await store.open()
    except Exception as exc:  # a backend that is down fails, never skips
        pytest.fail(f"backend {store_url} unreachable: {exc}")
    await store.migrate()
    yield store
    await store.close()
