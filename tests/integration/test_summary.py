"""The summary's latencies and throughput, read from the store: runs executed by a worker
show up in every process's summary, and a tenant's summary counts only its own runs."""

from __future__ import annotations

import asyncio

import runwright as rw
from runwright.observe import _metrics as metrics

from .conftest import running_worker

NAP_S = 0.2


async def test_the_summary_has_percentiles_and_throughput_of_ended_runs(app: rw.App, store_url: str) -> None:
    @app.task
    async def nap(ctx: rw.Context) -> None:
        await asyncio.sleep(NAP_S)

    empty = await metrics.summary(app)
    assert (empty["latency_sample"], empty["throughput_per_min"]) == (0, 0.0)
    assert empty["run_duration_s"] == {"p50": None, "p95": None, "p99": None}
    async with running_worker(app, concurrency=5):
        handles = [await app.submit(nap) for _ in range(4)]
        handles.append(await app.tenant("acme").submit(nap))
        for handle in handles:
            await handle.result(timeout_s=60)
    async with rw.App(store_url) as other:  # another process's view: the store's numbers
        found = await metrics.summary(other)
        acme = await metrics.summary(other.tenant("acme"))
    assert found["latency_sample"] == 5 and found["throughput_per_min"] == 5.0
    assert all(found["run_duration_s"][p] >= NAP_S for p in ("p50", "p95", "p99")), found
    assert all(found["submit_to_start_s"][p] >= 0 for p in ("p50", "p95", "p99")), found
    assert (acme["latency_sample"], acme["throughput_per_min"]) == (1, 1.0), "its own runs only"
