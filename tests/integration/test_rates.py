"""Rates per key through the App and a real worker, on every backend: the key and cost
computed (and refused) at submission, runs held by their rate that say why and when, and
start as their window allows, a max changed live, and the faces (`app.limits`, the
summary, Prometheus by the rate's name)."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import runwright as rw
from runwright.observe import _metrics as metrics

from .conftest import running_worker


async def test_keys_and_costs_are_computed_at_submission_and_bad_ones_refused(app):
    @app.task(rate=[rw.Rate(key="{args.customer}", max=10, per_s=60, cost="{args.tokens}", name="tpm"),
                    rw.Rate(key="all", max=5, per_s=1)],
              concurrency=rw.Limit(key="{args.customer}", max=2, name="conc"))
    async def call(customer: str, tokens: int = 1) -> None:
        return None

    @app.task(rate=rw.Rate(key="{tenant}", max=3, per_s=2.5, cost=lambda args, tenant: len(args["text"]) / 2))
    async def by_function(text: str) -> None:
        return None

    run = (await app.submit(call, customer="acme", tokens=7)).run
    assert json.loads(run.limits) == [["conc", "acme", 2], ["tpm", "acme", 10, 60, 7],
                                      ["call", "all", 5, 1, 1]]
    assert (await app.get(run.id)).run.limits == run.limits
    handle = await app.tenant("t1").submit(by_function, text="abc")
    assert json.loads(handle.run.limits) == [["by_function", "t1", 3, 2.5, 1.5]]
    with pytest.raises(rw.InvalidInput, match="a cost of 11 is over its max of 10 per 60 s"):
        await app.submit(call, customer="acme", tokens=11)
    with pytest.raises(rw.InvalidInput, match="cost is a number >= 0"):
        await app.submit(call, customer="acme", tokens=-1)
    with pytest.raises(rw.InvalidInput, match="per tenant; submit with tenant="):
        await app.submit(by_function, text="a")
    with pytest.raises(rw.ConfigError, match="per_s is a number of seconds"):
        rw.Rate(key="x", max=1, per_s=0)
    with pytest.raises(rw.ConfigError, match="cost template is one argument"):
        rw.Rate(key="x", max=1, per_s=1, cost="{tenant}")
    with pytest.raises(rw.ConfigError, match="max is an int"):
        rw.Rate(key="x", max=-1, per_s=1)
    with pytest.raises(rw.ConfigError, match="distinct names"):
        app.task(rate=rw.Rate(key="a", max=1, per_s=1), concurrency=rw.Limit(key="b", max=1))(lambda: None)
    with pytest.raises(rw.ConfigError, match="rate= takes a Rate"):
        app.task(rate=[rw.Limit(key="b", max=1)])(lambda: None)  # type: ignore[list-item]


async def test_a_missing_cost_argument_is_refused_and_nothing_is_written(app):
    @app.task(rate=rw.Rate(key="k", max=10, per_s=60, cost="{args.tokens}"))
    async def call(tokens: int | None = None) -> None:
        return None

    with pytest.raises(rw.InvalidInput, match="costs argument 'tokens', which this submission does not give"):
        await app.submit(call)
    assert await app.list_runs() == []


async def test_runs_held_by_their_rate_say_why_then_start_as_the_window_allows(app):
    @app.task(rate=rw.Rate(key="{args.customer}", max=2, per_s=1.5, name="crm"))
    async def call(customer: str, n: int) -> None:
        return None

    handles = [await app.submit(call, customer="acme", n=n) for n in range(5)]
    async with running_worker(app):
        first = [await h.result(timeout_s=30) for h in handles[:2]]
        assert first == [None, None]
        # The third is held by its rate now, with a time to start; the faces show the key.
        third = await handles[2].refresh()
        why = (await app.waiting([third])).get(third.id)
        if why is not None:  # it may have started already, were the window over
            assert why.reason is rw.WaitReason.RATE
            assert why.until is not None and "rate 'crm' of key 'acme'" in why.detail
        uses = [use for use in await app.limits() if use.name == "crm"]
        assert [(u.key, u.max, u.per_s) for u in uses] == [("acme", 2, 1.5)]
        registry = CollectorRegistry()
        metrics._limit_gauges(await app.limits(), registry)
        text = generate_latest(registry).decode()
        assert 'runwright_rate_spent{rate="crm"}' in text and "acme" not in text
        summary = [u for u in metrics.limits_summary(await app.limits()) if u["limit"] == "crm"]
        assert summary[0]["per_s"] == 1.5
        for h in handles[2:]:
            await h.result(timeout_s=30)
    runs = sorted([(await h.refresh()).started_at for h in handles])
    for i, at in enumerate(runs):
        assert sum(1 for other in runs[i:] if other < at + 1.5) <= 2, runs


async def test_a_rate_raised_live_lets_held_runs_start(app):
    @app.task(rate=rw.Rate(key="k", max=1, per_s=3600, name="slow"))
    async def call(n: int) -> None:
        return None

    handles = [await app.submit(call, n=n) for n in range(3)]
    async with running_worker(app):
        await handles[0].result(timeout_s=30)
        second = await handles[1].refresh()
        assert (await app.waiting([second]))[second.id].reason is rw.WaitReason.RATE
        await app.set_limit("slow", 3)
        for h in handles[1:]:
            await h.result(timeout_s=30)


async def test_a_worker_wakes_when_a_window_ends_not_at_its_poll(app):
    """Runs held by their rate start as their windows end: with a poll of 60 s, six runs
    at 2 per 0.3 s take three windows, not two polls (the worker sleeps until the next
    window's end, RunNextDueParams runs="rate_end")."""
    @app.task(rate=rw.Rate(key="k", max=2, per_s=0.3, name="brisk"))
    async def brisk(n: int) -> int:
        return n

    handles = [await app.submit(brisk, n=n) for n in range(6)]
    async with running_worker(app, poll_s=60):
        async with asyncio.timeout(30):  # two polls would be 120 s
            assert [await h.result(timeout_s=30) for h in handles] == list(range(6))
    starts = sorted([(await h.refresh()).started_at for h in handles])
    assert starts[-1] - starts[0] >= 0.3 * 2 - 0.05, f"they kept their rate: {starts}"
