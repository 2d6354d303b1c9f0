"""Each metric an operator alerts on moves when its event happens, in a worker of this
process (the counters are the process's own: each test reads how much they moved)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

import runwright as rw
from runwright.engine._probes import Probes

from ..conftest import PG_BASE
from ..process.harness import wait_until
from ..tcp_proxy import TcpProxy
from .conftest import running_worker
from .test_execution import wait_for_log


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Moved:
    """How much some samples moved since this was made."""

    def __init__(self, *samples: tuple[str, dict[str, str]]) -> None:
        self._before = {(name, tuple(labels.items())): value(name, **labels) for name, labels in samples}

    def __call__(self, name: str, **labels: str) -> float:
        return value(name, **labels) - self._before[name, tuple(labels.items())]


def sample(name: str, **labels: str) -> tuple[str, dict[str, str]]:
    return name, labels


async def test_claims_commits_renewals_queue_wait_and_deferrals_are_counted(app: rw.App) -> None:
    release = asyncio.Event()

    @app.task
    async def held(ctx: rw.Context) -> None:
        await release.wait()

    @app.task
    async def napper(ctx: rw.Context) -> None:
        # Parks (a deferral): long enough that a slow journal write on a loaded machine
        # does not leave it short enough to sleep inline.
        await ctx.sleep(3.0)

    calls = []

    @app.task(retries=1, backoff=rw.Backoff(base_s=0.05, cap_s=0.05))
    async def flaky(ctx: rw.Context) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first attempt fails")

    @app.task
    async def kid(ctx: rw.Context) -> int:
        await release.wait()  # its parent surely parks, waiting for it
        return 1

    @app.task
    async def parent(ctx: rw.Context) -> int:
        child = await ctx.submit(kid)
        return int(await child)  # parks until the child ends

    tasks = ("held", "napper", "flaky", "kid", "parent")
    moved = Moved(sample("runwright_claim_batch_size_sum"), sample("runwright_claim_batch_size_count"),
                  sample("runwright_finish_batch_seconds_count"),
                  sample("runwright_submit_to_start_seconds_count", queue="default"),
                  sample("runwright_lease_renewals_total", outcome="renewed"),
                  *[sample("runwright_deferrals_total", reason=r) for r in ("sleep", "children", "retry")],
                  *[sample("runwright_attempts_total", task=t) for t in tasks])
    handles = [await app.submit(name) for name in tasks]
    async with running_worker(app, concurrency=10, lease_s=1.0):
        await wait_until(lambda: moved("runwright_lease_renewals_total", outcome="renewed") >= 1,
                         "a lease renewal of the held run")
        await wait_until(lambda: moved("runwright_deferrals_total", reason="children") == 1,
                         "the parent parks until its child ends")
        release.set()
        for handle in handles:
            await handle.result(timeout_s=60)
    claims = sum(moved("runwright_attempts_total", task=t) for t in tasks)
    assert claims >= len(tasks) + 3, "napper, flaky and parent were claimed twice"
    assert moved("runwright_claim_batch_size_sum") == claims, "every claimed run is in a batch"
    assert 1 <= moved("runwright_claim_batch_size_count") <= claims
    assert moved("runwright_submit_to_start_seconds_count", queue="default") == claims, "a wait per claim"
    assert 1 <= moved("runwright_finish_batch_seconds_count") <= claims
    assert moved("runwright_deferrals_total", reason="sleep") == 1
    assert moved("runwright_deferrals_total", reason="retry") == 1
    assert moved("runwright_deferrals_total", reason="children") == 1


async def test_a_graceful_stop_counts_runs_drained_and_given_back(app: rw.App, caplog) -> None:
    release, started = asyncio.Event(), asyncio.Event()

    @app.task
    async def short(ctx: rw.Context) -> None:
        started.set()
        await release.wait()

    @app.task
    async def endless(ctx: rw.Context) -> None:
        await asyncio.Event().wait()

    moved = Moved(sample("runwright_shutdown_runs_total", how="drained"),
                  sample("runwright_shutdown_runs_total", how="given_back"))
    worker = app.worker(concurrency=4, poll_s=0.2, drain_grace_s=2.0)
    running = asyncio.create_task(worker.run())
    first, second = await app.submit(short), await app.submit(endless)
    await wait_until(lambda: _both_running(app, first.id, second.id), "both runs are running")
    await started.wait()
    with caplog.at_level(logging.INFO, logger="runwright"):
        worker.stop()
        await wait_for_log(caplog, "draining")  # both runs are in flight as the drain begins
    release.set()  # the short run ends within the grace; the endless one is given back
    await running
    assert (await first.refresh()).state is rw.RunState.SUCCEEDED
    assert (await second.refresh()).state is rw.RunState.QUEUED
    assert moved("runwright_shutdown_runs_total", how="drained") == 1
    assert moved("runwright_shutdown_runs_total", how="given_back") == 1


async def _both_running(app: rw.App, *run_ids: int) -> bool:
    runs = await app.store.run_get_many(list(run_ids))
    return len(runs) == len(run_ids) and all(r.state is rw.RunState.RUNNING for r in runs)


async def test_due_runs_of_a_task_no_live_worker_registers_are_unrunnable(app: rw.App,
                                                                         store_url: str) -> None:
    @app.task
    async def cpu(ctx: rw.Context) -> None: ...

    async with rw.App(store_url) as submitter:
        @submitter.task
        async def gpu_only(ctx: rw.Context) -> None: ...

        async with running_worker(app, orphan_check_s=0.1, orphan_age_s=0.0):
            handle = await submitter.submit(gpu_only)
            await wait_until(lambda: value("runwright_unrunnable_runs") == 1, "the gpu run is unrunnable")
            await handle.cancel()
            await wait_until(lambda: value("runwright_unrunnable_runs") == 0, "nothing is unrunnable")


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_store_out_of_reach_fails_renewals_and_readiness(store_url: str) -> None:
    """The worker reaches PostgreSQL through a forwarder that the test closes: /readyz
    answers 503 and lease renewals count as failed; once it is back, /readyz is 200."""
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.open()
    host_port = PG_BASE.split("@", 1)[1].split("/", 1)[0]
    app = rw.App(store_url.replace(host_port, f"127.0.0.1:{proxy.port}"))
    release = asyncio.Event()

    @app.task
    async def held(ctx: rw.Context) -> None:
        await release.wait()

    probes = Probes("127.0.0.1", 0)
    moved = Moved(sample("runwright_lease_renewals_total", outcome="failed"))
    try:
        await app.open()
        handle = await app.submit(held)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{probes.port}", timeout=30) as http:
            assert (await http.get("/readyz")).status_code == 503, "not ready before the worker started"
            async with running_worker(app, lease_s=2.0, drain_grace_s=0.5) as worker:
                probes.attach(worker)
                await wait_until(lambda: _status(http, "/readyz", 200), "ready")
                await wait_until(lambda: _running(app, handle.id), "the run is running")
                await proxy.close()
                not_ready = await wait_until(lambda: _status(http, "/readyz", 503), "not ready")
                assert "store" in not_ready["reason"], not_ready
                assert (await http.get("/healthz")).status_code == 200, "the process lives"
                await wait_until(lambda: moved("runwright_lease_renewals_total", outcome="failed") >= 1,
                                 "a renewal fails")
                await proxy.open()
                await wait_until(lambda: _status(http, "/readyz", 200), "ready again")
                release.set()
    finally:
        probes.close()
        await proxy.close()
        await app.close()


async def _status(http: httpx.AsyncClient, path: str, status: int) -> Any:
    response = await http.get(path)
    return response.json() if response.status_code == status else None


async def _running(app: rw.App, run_id: int) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.state is rw.RunState.RUNNING
