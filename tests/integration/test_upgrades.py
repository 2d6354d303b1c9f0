"""Upgrades and heterogeneous pools in one process: a worker runs only the majors its
tasks can run, and a run that no live worker can run is reported (summary, metric) and
then closed `failed` after unrunnable_after_s."""

from __future__ import annotations

from typing import AsyncIterator

import pytest
from prometheus_client import REGISTRY

import runwright as rw
from runwright.observe import _metrics as metrics

from ..process.harness import wait_until
from .conftest import running_worker

FAST = dict(orphan_check_s=0.05, orphan_age_s=0.0, rescue_interval_s=0.05)


def versioned(url: str, version: str, versions: object = None) -> rw.App:
    app = rw.App(url, version=version, builtin_jobs=False)

    @app.task(name="work", retries=0, versions=versions)
    async def work(ctx: rw.Context) -> str:
        return app.version

    return app


@pytest.fixture
async def apps(store_url: str) -> AsyncIterator[tuple[rw.App, rw.App]]:
    old, new = versioned(store_url, "1.2.0"), versioned(store_url, "2.0.0")
    async with old, new:
        yield old, new


async def test_a_run_no_live_worker_can_run_is_reported_then_closed_failed(apps) -> None:
    old, new = apps
    async with running_worker(new, **FAST):  # closes after the default hour: not in this test
        assert await (await new.submit("work")).result(timeout_s=30) == "2.0.0"
        stranded = await old.submit("work")
        assert (await stranded.refresh()).version == "1.2.0"
        await wait_until(lambda: gauge() == 1, "the old run is counted unrunnable")
        assert (await metrics.summary(new))["unrunnable"] == 1
        assert (await metrics.summary(new.tenant("other")))["unrunnable"] == 0
        assert (await stranded.refresh()).state is rw.RunState.QUEUED
    async with running_worker(new, unrunnable_after_s=0.5, **FAST):
        with pytest.raises(rw.RunFailed) as failed:
            await stranded.result(timeout_s=30)
        assert failed.value.error["type"] == "Unrunnable"
        assert "no live worker could run task 'work' at major 1" in failed.value.error["message"]
        await wait_until(lambda: gauge() == 0, "nothing is unrunnable")
        assert (await metrics.summary(new))["unrunnable"] == 0


async def test_a_task_declared_for_older_majors_runs_their_runs(store_url: str) -> None:
    old, both = versioned(store_url, "1.2.0"), versioned(store_url, "2.0.0", versions="1-2")
    async with old, both:
        async with running_worker(both, **FAST):
            assert await (await old.submit("work")).result(timeout_s=30) == "2.0.0"


async def test_an_old_worker_takes_the_old_runs_a_new_one_leaves(apps) -> None:
    old, new = apps
    async with running_worker(new, **FAST), running_worker(old, **FAST):
        handles = [await old.submit("work") for _ in range(5)] + [await new.submit("work") for _ in range(5)]
        outcomes = [await handle.result(timeout_s=30) for handle in handles]
    assert outcomes == ["1.2.0"] * 5 + ["2.0.0"] * 5


def gauge() -> float:
    return REGISTRY.get_sample_value("runwright_unrunnable_runs") or 0.0
