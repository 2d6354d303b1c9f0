"""Small builders shared by the conformance scenarios."""

from __future__ import annotations

import itertools

from runwright.store._params import RunClaimParams, RunInsertParams, StepRecordParams, WorkerRegisterParams

_keys = itertools.count()
T0 = 1_800_000_000.0  # an injected "now": scenarios drive the clock themselves


def insert(key: str | None = None, task: str = "t", queue: str = "default", priority: int = 2,
           run_at: float | None = None, now: float = T0, max_attempts: int = 3) -> RunInsertParams:
    return RunInsertParams(key=key or f"k{next(_keys)}", task=task, args='{"x":1}', queue=queue,
                           priority=priority, max_attempts=max_attempts, run_at=run_at, now=now)


def claim(worker_id: int, limit: int = 10, now: float = T0, lease_s: float = 30.0,
          queues: tuple[str, ...] = ("default",), tasks: tuple[str, ...] = ("t",)) -> RunClaimParams:
    return RunClaimParams(worker_id, queues, tasks, limit, lease_s, now=now)


def worker(pid: int = 0, now: float = T0) -> WorkerRegisterParams:
    import os

    return WorkerRegisterParams(host="test-host", pid=pid or os.getpid(), queues=["default"],
                                tasks=["t"], now=now)


async def step_record(store, params: StepRecordParams) -> bool:
    """One step journaled alone: whether the store wrote it."""
    (recorded,) = await store.step_record_many([params])
    return recorded


async def stamp_schema(store, version: int) -> None:
    """Record `version` as the store's schema, as a newer runwright would have."""
    if store.url.startswith(("redis://", "rediss://")):
        await store.redis.set(store.key("schema_version"), version)
        return
    async with store._transaction() as conn:
        await conn.execute("INSERT INTO schema_versions VALUES ($1, 'future', 0)", version)
