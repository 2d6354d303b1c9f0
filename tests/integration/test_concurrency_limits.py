"""Concurrency limits per key through the App and real workers, on every backend: the key
computed (and refused) at submission, a held run that says why it waits, the end of a
limited run waking a claimer of another process's connection at once (its poll is an
hour), and a max changed live."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import runwright as rw
from runwright.observe import _metrics as metrics

from .conftest import running_worker

HOUR_S = 3600.0  # a worker's poll: what must never be what starts a held run


async def test_keys_are_computed_at_submission_and_a_missing_argument_is_refused(app):
    @app.task(concurrency=[rw.Limit(key="{args.customer}", max=2), rw.Limit(key="all", max=9, name="g")])
    async def sync(customer: str, n: int = 0) -> None:
        return None

    @app.task(concurrency=rw.Limit(key="{tenant}", max=1))
    async def per_tenant() -> None:
        return None

    @app.task(concurrency=rw.Limit(key=lambda args, tenant: f"{tenant}/{args['n'] % 2}", max=1,
                                   name="parity"))
    async def by_function(n: int) -> None:
        return None

    run = (await app.submit(sync, customer="acme")).run
    assert json.loads(run.limits) == [["sync", "acme", 2], ["g", "all", 9]]
    assert (await app.get(run.id)).run.limits == run.limits  # as the store keeps it
    handle = await app.tenant("t1").submit(per_tenant)
    assert json.loads(handle.run.limits) == [["per_tenant", "t1", 1]]
    handle = await app.tenant("t1").submit(by_function, n=3)
    assert json.loads(handle.run.limits) == [["parity", "t1/1", 1]]
    with pytest.raises(rw.InvalidInput, match="limit 'per_tenant' is per tenant; submit with tenant="):
        await app.submit(per_tenant)
    with pytest.raises(rw.ConfigError, match=r"\{args.\} is neither"):
        rw.Limit(key="{args.}", max=1)
    with pytest.raises(rw.ConfigError, match="max is an int"):
        rw.Limit(key="x", max=-1)
    with pytest.raises(rw.ConfigError, match="distinct names"):
        app.task(concurrency=[rw.Limit(key="a", max=1), rw.Limit(key="b", max=1)])(lambda: None)


async def test_a_missing_template_argument_is_refused_and_nothing_is_written(app):
    @app.task(concurrency=rw.Limit(key="{args.customer}", max=1))
    async def sync(customer: str | None = None) -> None:
        return None

    with pytest.raises(rw.InvalidInput, match="keyed by argument 'customer', which this submission "
                                              "does not give"):
        await app.submit(sync)
    assert await app.list_runs() == []


async def test_the_end_of_a_limited_run_wakes_another_connections_claimer_not_its_poll(app, store_url):
    """Two apps (two store connections, two hubs: only the store's notification carries
    the wake), each with a task of one shared limit of max 1. B's run is held while A's
    runs; as A's ends, B's starts, though B's worker polls once an hour."""
    release = asyncio.Event()

    @app.task(concurrency=rw.Limit(key="k", max=1, name="shared"))
    async def first() -> str:
        await release.wait()
        return "a"

    other = rw.App(store_url)
    await other.open()
    try:
        @other.task(concurrency=rw.Limit(key="k", max=1, name="shared"))
        async def second() -> str:
            return "b"

        async with running_worker(app, poll_s=HOUR_S), running_worker(other, poll_s=HOUR_S):
            a = await app.submit(first)
            async with asyncio.timeout(60):
                while (await a.refresh()).state is not rw.RunState.RUNNING:
                    await asyncio.sleep(0.02)
            # Due a minute ago: by any process's reading of the store's clock, the worker
            # that is held sleeps on its poll, never on b's due time.
            b = await other.submit(second, run_at=time.time() - 60)
            # Held by the limit (a claim took it not): it says so, naming the full key.
            async with asyncio.timeout(60):
                while True:
                    why = (await other.waiting([await b.refresh()])).get(b.id)
                    if why is not None and why.reason is rw.WaitReason.LIMIT:
                        break
                    await asyncio.sleep(0.05)
            assert why.detail.startswith("it waits for its concurrency limit: limit 'shared' of key 'k' "
                                         "has 1 of 1 running")
            assert (await b.refresh()).state is rw.RunState.QUEUED
            # Until its store listens, a worker polls fast (`hub.degraded`), and a listener
            # that (re)connects wakes everyone: let B's listen to all it will (a result's
            # wait widens it), and its last fast poll pass, so that only a notification of
            # A's end can wake it.
            await other.store.listen(runs=True)
            async with asyncio.timeout(60):
                while other.store.hub.degraded:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            release.set()
            assert await a.result(timeout_s=60) == "a"
            assert await b.result(timeout_s=60) == "b"  # woken: an hour's poll would not
    finally:
        await other.close()


async def test_a_worker_declared_dead_while_idle_claims_again_once_registered_again(app):
    """A claim of a worker whose registration was dropped (declared dead: under load its
    liveness lapsed) takes nothing, and the notification that woke it is spent. Its
    heartbeat registers it again; that must wake its claimer, or the run that came due
    meanwhile waits for the poll (an hour here): a limited run due now that a claim did not
    take is taken for one held by its limit, which only a notification ends (the worker's
    next due time leaves it out). Seen as the end of a limited run that did not wake
    another process's claimer, once, under load."""

    @app.task(concurrency=rw.Limit(key="k", max=1, name="alone"))
    async def job() -> str:
        return "done"

    async with running_worker(app, poll_s=HOUR_S) as worker:
        async with asyncio.timeout(60):
            while app.store.hub.degraded:  # polling fast, it would claim again anyway
                await asyncio.sleep(0.02)
        # Declared dead (as a rescuer decides on a lapsed liveness), then a run comes due:
        # the claim it wakes for is refused, and the heartbeat soon registers it again.
        await app.store.worker_deregister(worker.id)
        handle = await app.submit(job)
        assert await handle.result(timeout_s=60) == "done"


async def test_a_max_raised_live_lets_held_runs_start(app):
    gate = asyncio.Event()
    started: list[int] = []

    @app.task(concurrency=rw.Limit(key="{args.customer}", max=1, name="crm"))
    async def call_crm(customer: str, n: int) -> int:
        started.append(n)
        await gate.wait()
        return n

    async with running_worker(app, poll_s=HOUR_S, concurrency=8):
        handles = [await app.submit(call_crm, customer="acme", n=n) for n in range(4)]
        async with asyncio.timeout(60):
            while len(started) < 1:
                await asyncio.sleep(0.02)
        uses = await app.limits()
        assert [(u.name, u.key, u.max, u.running, u.queued) for u in uses] == [("crm", "acme", 1, 1, 3)]
        # The faces: the operator's summary lists the key; a tenant's never does (a key
        # names a tenant or a customer); Prometheus labels by the limit's name alone.
        summary = await metrics.summary(app)
        assert summary["limits"] == [{"limit": "crm", "key": "acme", "running": 1, "queued": 3, "max": 1}]
        assert "limits" not in await metrics.summary(app.tenant("other"))
        text = (await metrics.scrape(app)).decode()
        assert 'runwright_limit_running{limit="crm"} 1.0' in text
        assert 'runwright_limit_queued{limit="crm"} 3.0' in text
        assert 'runwright_limit_keys_full{limit="crm"} 1.0' in text
        assert "acme" not in text
        await app.set_limit("crm:acme", 3)
        async with asyncio.timeout(60):  # taken at the next claim, which the change wakes
            while len(started) < 3:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        assert len(started) == 3, "no more than the new max"
        gate.set()
        assert sorted([await h.result(timeout_s=60) for h in handles]) == [0, 1, 2, 3]
        await app.set_limit("crm:acme", None)
    with pytest.raises(rw.InvalidInput):
        await app.set_limit("no spaces", 1)


async def test_a_scheduled_run_of_a_limited_task_carries_its_limits(app):
    @app.task(concurrency=rw.Limit(key="{args.region}", max=1))
    async def report(region: str) -> str:
        return region

    app.schedule("every-second", cron="* * * * * *", task=report, args={"region": "eu"})
    async with running_worker(app, schedule_tick_s=0.1):
        async with asyncio.timeout(30):
            while not (fired := await app.list_runs(task="report")):
                await asyncio.sleep(0.05)
    assert json.loads(fired[0].limits) == [["report", "eu", 1]]
