"""Whose clock judges: the store's by default, an injected one when given, on every backend.

Other scenarios inject `now` into every call; these leave it out, so the store judges by
its own clock (on PostgreSQL and Redis the database server's, read inside the statement
or script), and check that an injected clock still overrides it.
"""

from __future__ import annotations

import time

from runwright.core._clock import Clock
from runwright.store import store_from_url
from runwright.store._params import RunClaimParams, RunExtendParams, RunRescueParams

from .helpers import insert, worker

LEASE_S = 30.0
CLOSE_S = 5.0  # the test machine's clock and the database's: the same machine here


def _claim(worker_id: int, now: float | None = None) -> RunClaimParams:
    return RunClaimParams(worker_id, ("default",), ("t",), 10, LEASE_S, now=now)


async def test_without_an_injected_time_leases_and_due_times_are_the_stores(store) -> None:
    wid = await store.worker_register(worker(now=time.time()))
    later = time.time() + 3600
    (due,) = await store.run_insert_many([insert(run_at=time.time() - 1)])
    (not_due,) = await store.run_insert_many([insert(run_at=later)])
    (claimed,) = await store.run_claim(_claim(wid))
    assert claimed.id == due.id, "only the run due by the store's clock"
    assert abs(claimed.lease_expires_at - (time.time() + LEASE_S)) < CLOSE_S
    extended = await store.run_extend(RunExtendParams(wid, [(claimed.id, claimed.fence)], 2 * LEASE_S))
    assert extended.lost == []
    assert abs((await store.run_get(claimed.id)).lease_expires_at - (time.time() + 2 * LEASE_S)) < CLOSE_S
    params = RunRescueParams(worker_stale_s=1e9)
    assert await store.run_rescue_many(params) == [], "a live lease, by the store's clock"
    params.now = time.time() + 3 * LEASE_S
    assert [r.id for r in await store.run_rescue_many(params)] == [claimed.id], "lapsed when told so"
    late = await store.run_claim(_claim(wid, now=later + 1))
    assert {r.id for r in late} == {due.id, not_due.id}, "an injected time still decides what is due"


async def test_an_injected_clock_overrides_the_stores(store_url: str) -> None:
    store = store_from_url(store_url)
    ahead_s = 3600.0
    store.clock = Clock(lambda: time.time() + ahead_s)
    await store.open()
    try:
        await store.migrate()
        wid = await store.worker_register(worker(now=time.time()))
        (run,) = await store.run_insert_many([insert(run_at=time.time() + ahead_s / 2)])
        (claimed,) = await store.run_claim(_claim(wid))
        assert claimed.id == run.id, "due by the injected clock, an hour ahead"
        assert abs(claimed.lease_expires_at - (time.time() + ahead_s + LEASE_S)) < CLOSE_S
    finally:
        await store.close()
