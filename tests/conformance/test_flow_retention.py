"""Store scenarios for retention of flow control keys' records (`flow_key_reclaim`,
store._flow_rules.unneeded): a key's record goes once no decision needs it (its run
ended for good, or was reclaimed, and a throttle's longest period passed), and what a
submission of the key decides after is what it decided before. Each runs on every
backend."""

from __future__ import annotations

import asyncio

import pytest

from runwright.core._clock import Clock
from runwright.engine._sweeper import Retention, Sweeper
from runwright.errors import SingletonTaken
from runwright.runs import RunState
from runwright.store._params import (
    FlowKeyReclaimParams,
    RunCancelParams,
    RunFinishParams,
    RunRetryParams,
)

from .helpers import T0, worker
from .test_flow_control import claim, debounce, done, one, singleton, throttle

DAY = 86_400.0


async def reclaim(store, now: float, dry_run: bool = False) -> int:
    return await store.flow_key_reclaim(FlowKeyReclaimParams(limit=1000, dry_run=dry_run, now=now))


async def test_records_go_once_no_decision_needs_them(store):
    wid = await store.worker_register(worker())
    ended = await one(store, singleton(key="ended"))
    (running,) = await store.run_claim(claim(wid))
    await store.run_finish_many([done(running)])
    failed = await one(store, singleton(key="failed"))
    (running,) = await store.run_claim(claim(wid))
    await store.run_finish_many([RunFinishParams(running.id, running.fence, RunState.FAILED,
                                                 error='{"type": "E"}', now=T0)])
    throttled = await one(store, throttle(key="throttled"))
    (running,) = await store.run_claim(claim(wid))
    assert running.id == throttled.id
    await store.run_finish_many([done(running)])
    cancelled = await one(store, debounce(key="cancelled"))
    await store.run_cancel(RunCancelParams(cancelled.id, now=T0))
    queued = await one(store, singleton(key="queued"))

    assert await reclaim(store, T0 + 10, dry_run=True) == 2
    assert await reclaim(store, T0 + 10, dry_run=True) == 2, "a dry run removes nothing"
    assert await reclaim(store, T0 + 10) == 2, "the ended singleton's and the cancelled debounce's"
    assert await reclaim(store, T0 + 10) == 0
    assert (await one(store, throttle(key="throttled", now=T0 + 10))).outcome == "dropped", \
        "a throttle's record stays through its period"
    assert await reclaim(store, T0 + DAY + 1) == 1, "the throttle's, past the longest period"
    assert (await one(store, throttle(key="throttled", now=T0 + DAY + 2))).outcome == "new"
    with_none = await one(store, singleton(key="ended", now=T0 + DAY + 2))
    assert with_none.outcome == "new" and with_none.id != ended.id
    with pytest.raises(SingletonTaken) as taken:
        await one(store, singleton(key="queued", now=T0 + DAY + 2))
    assert taken.value.run_id == queued.id, "a queued run's record stays"
    # A failed run's record stays: retried, the run holds its singleton key again.
    await store.run_retry(RunRetryParams(failed.id, now=T0 + DAY + 3))
    with pytest.raises(SingletonTaken) as taken:
        await one(store, singleton(key="failed", now=T0 + DAY + 4))
    assert taken.value.run_id == failed.id


async def test_a_record_reclaimed_among_submitters_leaves_one_run_of_the_key(store):
    """Submitters of an ended singleton key race reclaims of its record: one of them makes
    the key's run, the others are refused naming it, however the removals fall."""
    wid = await store.worker_register(worker())
    for round_ in range(5):
        key = f"race-{round_}"
        first = await one(store, singleton(key=key))
        (running,) = await store.run_claim(claim(wid))
        await store.run_finish_many([done(running)])
        assert running.id == first.id
        results = await asyncio.gather(*[one(store, singleton(key=key)) for _ in range(6)],
                                       *[reclaim(store, T0 + 10) for _ in range(3)], return_exceptions=True)
        made = [r for r in results[:6] if not isinstance(r, BaseException)]
        refused = [r for r in results[:6] if isinstance(r, SingletonTaken)]
        assert len(made) == 1 and len(refused) == 5, results
        assert {r.run_id for r in refused} == {made[0].id}
        assert all(isinstance(r, int) for r in results[6:]), results[6:]
        await store.run_cancel(RunCancelParams(made[0].id, now=T0))


async def test_every_retention_pass_removes_the_unneeded_records(store):
    """Whatever bounds a pass is given (here only a tombstone age): a record no decision
    needs is no history anyone keeps."""
    wid = await store.worker_register(worker())
    first = await one(store, singleton(key="swept"))
    (running,) = await store.run_claim(claim(wid))
    await store.run_finish_many([done(running)])
    await one(store, singleton(key="kept"))
    assert running.id == first.id
    sweeper = Sweeper(store, Clock(lambda: T0 + 10), Retention(tombstone_age_s=3600), holder="sweeper",
                      lease_s=60)
    assert (await sweeper.sweep(dry_run=True)).flow_keys == 1
    report = await sweeper.sweep()
    assert report.flow_keys == 1 and report.as_dict()["flow_keys"] == 1
    assert (await sweeper.sweep()).flow_keys == 0
