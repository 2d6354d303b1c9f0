"""Fair shares across keys through the App and a real worker, on every backend: the key
computed (and refused) at submission and carried in the run's limits text, the checks of
`Fair` and of an operator's weight, and a worker whose claims take the keys in turns."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import runwright as rw
from runwright.observe import _metrics as metrics

from .conftest import running_worker


async def test_a_fair_key_is_computed_at_submission_and_rides_with_the_limits(app):
    @app.task(fair=rw.Fair(key="{tenant}"))
    async def shared() -> None:
        return None

    @app.task(fair=rw.Fair(key="{args.customer}", name="customers"),
              concurrency=rw.Limit(key="{args.customer}", max=2, name="crm"))
    async def both(customer: str) -> None:
        return None

    run = (await app.tenant("t1").submit(shared)).run
    assert json.loads(run.limits) == [["fair/shared", "t1", 1]]
    run = (await app.submit(both, customer="acme")).run
    assert json.loads(run.limits) == [["crm", "acme", 2], ["fair/customers", "acme", 1]]
    with pytest.raises(rw.InvalidInput, match="fair key 'shared' is per tenant; submit with tenant="):
        await app.submit(shared)
    # A fair key is no limit: only crm's key is listed.
    assert [(u.name, u.key) for u in await app.limits()] == [("crm", "acme")]


async def test_fair_and_weights_are_checked(app):
    with pytest.raises(rw.ConfigError, match=r"\{args.\} is neither"):
        rw.Fair(key="{args.}")
    with pytest.raises(rw.ConfigError, match="a Fair's name is"):
        rw.Fair(key="x", name="a:b")
    with pytest.raises(rw.ConfigError, match="fair= takes a Fair"):
        app.task(fair="{tenant}")(lambda: None)
    for weight in (0, -1, 10_001, True, 1.5, "2"):
        with pytest.raises(rw.InvalidInput, match="weight is an int in 1..10000"):
            await app.set_weight("tenants:acme", weight)
    for target in ("", "a b", "a:" + "k" * 201, 3):
        with pytest.raises(rw.InvalidInput):
            await app.set_weight(target, 2)
    await app.set_weight("tenants:acme", 3)
    await app.set_weight("tenants", 2)
    assert await app.limits() == [], "a weight is not a limit's max"
    assert await app.weights() == {"tenants": 2, "tenants:acme": 3}
    # The operator's summary lists them (the dashboard's overview shows that); a tenant's
    # does not: a key names a tenant or a customer.
    assert (await metrics.summary(app))["weights"] == {"tenants": 2, "tenants:acme": 3}
    assert "weights" not in await metrics.summary(app.tenant("other"))
    # Prometheus has them by the Fair's name only (a key is a submitter's value).
    await app.set_weight("tenants:globex", 5)
    registry = CollectorRegistry()
    metrics._weight_gauges(await app.weights(), registry)
    text = generate_latest(registry).decode()
    assert 'runwright_fair_weight{fair="tenants"} 2.0' in text, text
    assert 'runwright_fair_keys_weighted{fair="tenants"} 2.0' in text, text
    assert "acme" not in text and "globex" not in text
    await app.set_weight("tenants:globex", None)
    await app.set_weight("tenants", None)
    assert (await metrics.summary(app))["weights"] == {"tenants:acme": 3}


async def test_a_worker_takes_the_keys_in_turns(app):
    started: list[str] = []

    @app.task(fair=rw.Fair(key="{tenant}", name="tenants"))
    async def job(n: int) -> None:
        started.append(n)

    # A's backlog first, then B's two runs, all before the worker starts: in claim
    # order B's would come 21st and 22nd.
    for n in range(20):
        await app.tenant("A").submit(job, n=n)
    for n in (100, 101):
        await app.tenant("B").submit(job, n=n)
    async with running_worker(app, concurrency=1):
        async with asyncio.timeout(60):
            while len(started) < 22:
                await asyncio.sleep(0.02)
    assert started[:4] in ([0, 100, 1, 101], [100, 0, 101, 1]), started
    assert [n for n in started if n < 100] == list(range(20)), "a key's runs in their order"
