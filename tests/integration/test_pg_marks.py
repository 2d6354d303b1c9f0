"""A PostgreSQL worker's liveness mark (store/postgres/_marks.py) is taken again at once when
its session is cut, however the cut meets the session: idle, or under a heartbeat that reads
the server's goodbye half-way (where asyncpg tells no termination listener). A mark missing
past the grace (MISSING_GRACE_S) gets a live worker taken over."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from runwright.errors import StoreUnreachable
from runwright.store._params import WorkerHeartbeatParams, WorkerRegisterParams
from runwright.store.postgres._store import PostgresStore

from ..conftest import PG_BASE

HALF_READS = 3  # cuts whose heartbeat met the goodbye half-read: the case raced
MAX_CUTS = 400  # a few percent of cuts at least meet it
RETAKEN_WITHIN_S = 5.0  # far past a retake (ms), far short of a heartbeat left to come


async def _mark_pid(admin: asyncpg.Connection, store: PostgresStore, worker_id: int) -> int | None:
    return await admin.fetchval(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid"
        " AND objid::bigint = $2 AND objsubid = 2 AND granted", store.lock_namespace, worker_id)


@pytest.mark.parametrize("backend", ["postgres"])  # the shared store fixture, on PostgreSQL alone
async def test_a_mark_cut_under_a_heartbeat_is_taken_again_without_another_heartbeat(
        store: PostgresStore) -> None:
    assert isinstance(store, PostgresStore)
    worker_id = await store.worker_register(WorkerRegisterParams(
        host="h", pid=1, queues=["default"], tasks=["t"], version="v"))
    admin = await asyncpg.connect(PG_BASE)
    half_read = 0
    try:
        cuts = 0
        while half_read < HALF_READS:
            cuts += 1
            assert cuts <= MAX_CUTS, f"only {half_read} of {MAX_CUTS} heartbeats met a half-read goodbye"
            pid = await _mark_pid(admin, store, worker_id)
            assert pid is not None, "the mark is held before the cut"
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
            # The heartbeat lands on the session as the server's goodbye arrives.
            try:
                assert await store.worker_heartbeat(WorkerHeartbeatParams(worker_id))
            except StoreUnreachable as exc:
                half_read += "cannot switch to state" in str(exc)
            # No further heartbeat: the mark must come back by itself.
            deadline = time.monotonic() + RETAKEN_WITHIN_S
            while await _mark_pid(admin, store, worker_id) in (None, pid):
                assert time.monotonic() < deadline, "the mark was not taken again"
                await asyncio.sleep(0.01)
    finally:
        await admin.close()


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_registration_whose_session_is_cut_is_a_store_blink_and_the_next_one_registers(
        store: PostgresStore) -> None:
    """A worker starting while its database session is cut must be told StoreUnreachable,
    which its start rides out (through_blinks), not asyncpg's own error, which crashed it.
    The registration is held inside its transaction (behind an exclusive hold of the
    registrations' lock, as an unrunnable sweep takes it) and its session cut there."""
    assert isinstance(store, PostgresStore)
    admin = await asyncpg.connect(PG_BASE)
    try:
        await admin.execute("SELECT pg_advisory_lock($1, 0)", store.lock_namespace)
        registering = asyncio.create_task(store.worker_register(WorkerRegisterParams(
            host="h", pid=1, queues=["default"], tasks=["t"], version="v")))
        async with asyncio.timeout(30):
            while not (pid := await admin.fetchval(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid"
                    " AND objid = 0 AND NOT granted", store.lock_namespace)):
                await asyncio.sleep(0.01)
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
        with pytest.raises(StoreUnreachable, match="cannot register"):
            await asyncio.wait_for(registering, 30)
        await admin.execute("SELECT pg_advisory_unlock($1, 0)", store.lock_namespace)
    finally:
        await admin.close()
    assert await store.worker_register(WorkerRegisterParams(
        host="h", pid=1, queues=["default"], tasks=["t"], version="v")) > 0
