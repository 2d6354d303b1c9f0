"""The faces of the fleet with real processes: `runwright fleet ...` and the HTTP routes
of a real `runwright serve`, which joins the fleet as `server-1`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import httpx

from ..ports import free_port
from ..process.harness import wait_until
from .conftest import APP_SPEC, FAST, ROOT, Processes
from .test_processes import ready_rows

OPERATOR = {"Authorization": "Bearer op-token"}
TENANT = {"Authorization": "Bearer tenant-token"}


def fleet_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwright", "fleet", *args, "--major", "1",
                           "--url", url], cwd=ROOT, env={**os.environ, **FAST},
                          capture_output=True, text=True, timeout=120)


async def test_the_cli_reports_one_row_per_process_and_exits_0_only_when_all_applied(
        client, processes: Processes, store_url):
    worker = processes.start()
    await ready_rows(client, 1)
    done = fleet_cli(store_url, "broadcast", "whoami", "--json", "--timeout-s", "10")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["name"], row["generation"] >= 1, row["outcome"], row["pid"]) == (
        "worker-1", True, "applied", worker.pid)
    failed = fleet_cli(store_url, "broadcast", "break", "--json")
    assert failed.returncode == 1
    assert [(r["outcome"], "always fails" in r["error"]) for r in json.loads(failed.stdout)] == [
        ("failed", True)]
    census = fleet_cli(store_url, "workers", "--json")
    assert [(r["name"], r["state"], r["pid"]) for r in json.loads(census.stdout)] == [
        ("worker-1", "ready", worker.pid)]
    bad = fleet_cli(store_url, "broadcast", "ping", "--payload", "[1]")
    assert bad.returncode == 2 and "--payload must be a JSON object" in bad.stderr
    assert "Traceback" not in bad.stderr


async def test_the_http_routes_are_the_operators(client, processes: Processes, store_url, tmp_path):
    processes.start()
    port = free_port()
    env = {**os.environ, **FAST, "RUNWRIGHT_TOKENS": "tenant-token=acme",
           "RUNWRIGHT_OPERATOR_TOKENS": "op-token", "RUNWRIGHT_TEST_LEDGER": str(processes.ledger)}
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "runwright", "serve", APP_SPEC, "--port",
                                   str(port), "--url", store_url], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        await ready_rows(client, 1, kind="server")
        await ready_rows(client, 1)
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            census = (await http.get("/fleet", headers=OPERATOR)).json()
            assert census["root"] == "runwright:v1"
            assert [p["name"] for p in census["processes"]] == ["server-1", "worker-1"]
            assert (await http.get("/fleet", headers=TENANT)).status_code == 403
            sent = await http.post("/fleet/broadcast", headers=OPERATOR,
                                   json={"op": "ping", "timeout_s": 10})
            assert sent.status_code == 200 and sent.json()["ok"] is True
            assert [r["outcome"] for r in sent.json()["report"]] == ["applied", "applied"]
            broken = (await http.post("/fleet/broadcast", headers=OPERATOR,
                                      json={"op": "break", "timeout_s": 10})).json()
            assert broken["ok"] is False
            refused = await http.post("/fleet/broadcast", headers=TENANT, json={"op": "ping"})
            assert refused.status_code == 403
    finally:
        server.kill()
        server.wait()
    await wait_until(lambda: _only_worker(client), "the killed server's row passes its TTL")


def start_server(processes: Processes, store_url: str, port: int, log_path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **FAST, "RUNWRIGHT_TOKENS": "tenant-token=acme",
           "RUNWRIGHT_OPERATOR_TOKENS": "op-token", "RUNWRIGHT_TEST_LEDGER": str(processes.ledger)}
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "runwright", "serve", APP_SPEC, "--port",
                                 str(port), "--url", store_url], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)


async def test_a_server_reads_recycling_from_its_first_sigterm_through_its_drain(
        client, processes: Processes, store_url, tmp_path):
    worker = processes.start()
    port = free_port()
    server = start_server(processes, store_url, port, tmp_path / "server.log")
    try:
        await ready_rows(client, 1, kind="server")
        await ready_rows(client, 1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            # A request in flight (a broadcast whose handler holds) keeps the drain going.
            in_flight = asyncio.create_task(http.post("/fleet/broadcast", headers=OPERATOR, json={
                "op": "hold", "payload": {"s": 600}, "timeout_s": 8, "targets": ["worker-1"]}))
            await wait_until(lambda: (processes.ledger / f"held-{worker.pid}").exists(),
                             "the handler holds")
            server.send_signal(signal.SIGTERM)
            row = await wait_until(lambda: _server_reads(client, "recycling"), "the server reads recycling")
            assert row["drain_s"] == 10 and row["pid"] == server.pid
            assert not in_flight.done()  # announced while its request is still in flight
            answer = await in_flight
        assert answer.status_code == 200  # the request in flight was let finish
        assert [r["outcome"] for r in answer.json()["report"]] == ["timed_out"]
        await wait_until(lambda: server.poll() is not None, "the server exits after its drain")
        assert server.returncode == 0
        await wait_until(lambda: _only_worker(client), "the server's row is deleted")
    finally:
        server.kill()
        server.wait()


async def test_a_server_is_recycled_by_the_fleet_and_exits_0(client, processes: Processes, store_url,
                                                             tmp_path):
    port = free_port()
    server = start_server(processes, store_url, port, tmp_path / "server.log")
    try:
        [row] = await ready_rows(client, 1, kind="server")
        report = await client.fleet.broadcast("recycle", timeout_s=10, targets=[row["name"]])
        assert [(r.name, r.outcome.value) for r in report] == [(row["name"], "applied")]
        await wait_until(lambda: server.poll() is not None, "the recycled server exits")
        assert server.returncode == 0
        assert await client.fleet.workers() == []
    finally:
        server.kill()
        server.wait()


async def _server_reads(client, state: str) -> dict | None:
    rows = [r for r in await client.fleet.workers() if r["kind"] == "server" and r["state"] == state]
    return rows[0] if rows else None


async def _only_worker(client) -> bool:
    return [r["kind"] for r in await client.fleet.workers()] == ["worker"]
