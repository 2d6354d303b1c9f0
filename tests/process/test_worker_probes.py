"""A worker's --metrics-port: /metrics, /healthz and /readyz, per process of a pool, bound
where told; and the lease-lost count of a worker that stalled past its lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

import runwright as rw
from runwright.runs import RunState

from ..ports import free_ports
from . import apps
from .harness import APP_SPEC, ROOT, WorkerFleet, owner_pid, sigstop_outside_a_write, wait_until

pytestmark = pytest.mark.process


async def get(url: str) -> httpx.Response | None:
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            return await http.get(url)
    except httpx.TransportError:
        return None


async def answers(url: str, status: int = 200) -> httpx.Response | None:
    response = await get(url)
    return response if response is not None and response.status_code == status else None


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_each_process_of_a_pool_serves_its_own_probes_where_told(
        app: rw.App, store_url: str, tmp_path) -> None:
    host = "127.0.0.2"  # loopback, but not 127.0.0.1: the bind is the one asked for
    port = free_ports(2, host)
    pool = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC, "-p", "2",
                             "--metrics-host", host, "--metrics-port", str(port), "--url", store_url],
                            cwd=ROOT, env={**os.environ, apps.LEDGER_ENV: str(tmp_path)},
                            stderr=subprocess.DEVNULL)
    try:
        for each in (port, port + 1):
            await wait_until(lambda: answers(f"http://{host}:{each}/readyz"), f"port {each} is ready")
            assert (await get(f"http://{host}:{each}/healthz")).json() == {"status": "ok"}
        assert await get(f"http://127.0.0.1:{port}/healthz") is None, "bound to the host given only"
        handle = await app.submit(apps.record, n=1)
        await handle.result(timeout_s=60)

        async def counted() -> list[str]:
            texts = [(await get(f"http://{host}:{each}/metrics")).text for each in (port, port + 1)]
            return texts if any('runwright_attempts_total{task="record"} 1.0' in t for t in texts) else []

        texts = await wait_until(counted, "a process's metrics count the run")
        assert sum('runwright_attempts_total{task="record"} 1.0' in t for t in texts) == 1, \
            "each port serves one process's own counters"
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0


async def test_a_worker_stalled_past_its_lease_counts_the_lease_lost(
        app: rw.App, fleet: WorkerFleet, store_url: str) -> None:
    port = free_ports(1)
    metrics = f"http://127.0.0.1:{port}/metrics"
    zombie = fleet.start(lease_s=2, args=["--metrics-port", str(port)])
    handle = await app.submit(apps.hold, tag="never")  # its first start waits for ever
    await wait_until(lambda: fleet.events_by_run("start").get(handle.id), "the run starts")
    assert await owner_pid(app, await handle.refresh()) == zombie.pid
    await wait_until(lambda: answers(f"http://127.0.0.1:{port}/readyz"), "the worker is ready")
    await sigstop_outside_a_write(zombie, store_url)
    fleet.start(lease_s=2)
    run = await wait_until(lambda: _ended(app, handle.id), "the other worker takes the run over")
    assert (run.state, run.recoveries) == (RunState.SUCCEEDED, 1)
    zombie.signal(signal.SIGCONT)
    await wait_until(lambda: _lost_counted(metrics), "the resumed worker counts the lease it lost")
    assert (await get(f"http://127.0.0.1:{port}/readyz")).status_code == 200, "and works on"


async def _ended(app: rw.App, run_id: int) -> rw.Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None


async def _lost_counted(url: str) -> bool:
    response = await get(url)
    return response is not None and 'runwright_lease_renewals_total{outcome="lost"} 1.0' in response.text
