"""PostgreSQL sessions a worker process holds: its pools grow for a burst, within their
bounds, and shrink back after it to three sessions (its own session, which holds its
LISTENs, its fleet's and its liveness mark; its rescuer's waiter; the pool's kept
session), at any concurrency. Counted where an operator counts them, in pg_stat_activity,
by the names the store gives its sessions (`runwright:<schema>:<pid>`; the fleet's were
`runwright-fleet:<pid>:<schema>` when it had sessions of its own)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

import runwright as rw
from runwright.store.postgres._store import CLAIMING_SIZE, OWN_SESSIONS, POOL_IDLE_S, SESSIONS_AT_REST

from ..conftest import PG_BASE
from . import apps
from .harness import WorkerFleet, wait_until
from .test_workers import all_done

# Three workers: one in a burst at a time (the pool's bound, CLAIMING_SIZE and its two
# sessions of its own), the others at rest, and the client's pool.
pytestmark = [pytest.mark.process, pytest.mark.parametrize("backend", ["postgres"]),
              pytest.mark.pg_connections(32)]

STEADY = SESSIONS_AT_REST  # the README's "Sessions": 3
POOL_SIZE = 10  # the store's default (?pool_size=)
BURST_PEAK = POOL_SIZE + CLAIMING_SIZE + OWN_SESSIONS  # both pools full, its own session, its waiter


async def sessions_of(admin: asyncpg.Connection, schema: str, pid: int) -> int:
    return int(await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name IN ($1, $2)",
        f"runwright:{schema}:{pid}"[:63], f"runwright-fleet:{pid}:{schema}"[:63]))


async def test_a_worker_holds_three_sessions_after_a_burst_at_any_concurrency(
        app: rw.App, fleet: WorkerFleet, store_url: str, tmp_path: Path) -> None:
    schema = store_url.split("schema=")[1]
    workers = {n: fleet.start(concurrency=n) for n in (10, 200, 1000)}
    admin = await asyncpg.connect(PG_BASE)
    try:
        for worker in workers.values():
            await worker.wait_started()
        peaks: dict[int, int] = {}
        for concurrency, worker in workers.items():
            # Twice the slots, each run long enough for all to run at once: the claims,
            # finishes and lease extensions of a full worker, on every session it may take.
            handles = await app.submit_many(apps.nap, [{"seconds": 0.2}] * (2 * concurrency))
            peak = 0

            async def done_watching_peak(handles: list[rw.RunHandle] = handles,
                                         pid: int = worker.pid) -> object:
                nonlocal peak
                peak = max(peak, await sessions_of(admin, schema, pid))
                return await all_done(app, handles)

            await wait_until(done_watching_peak, f"the burst at concurrency {concurrency} ends")
            peaks[concurrency] = peak
        # All three at rest: each back to its steady state once the pools' sessions idle
        # out (POOL_IDLE_S), and staying there.
        for concurrency, worker in workers.items():
            await wait_until(lambda pid=worker.pid: _at_most(admin, schema, pid, STEADY),
                             f"the worker at concurrency {concurrency} is down to {STEADY} sessions")
        await asyncio.sleep(2 * POOL_IDLE_S)
        after = {n: await sessions_of(admin, schema, w.pid) for n, w in workers.items()}
        # Never one a run: within the pools' bounds, whatever the concurrency.
        assert all(peak <= BURST_PEAK for peak in peaks.values()), peaks
        assert after == {n: STEADY for n in workers}, after
        for worker in workers.values():
            assert await worker.stop() == 0
    finally:
        await admin.close()


async def _at_most(admin: asyncpg.Connection, schema: str, pid: int, most: int) -> bool:
    return await sessions_of(admin, schema, pid) <= most
