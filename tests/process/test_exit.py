"""The exit test of a multi-machine service, all through HTTP as a user's client sees it.

Three machines against one PostgreSQL, each a `runwright serve` process, the second and
third with a worker beside it. A run is submitted through the first (with a traceparent),
executed by the second machine's worker, streamed live through the third and replayed
from a seq through the first. The executing worker is killed with SIGKILL at a gate, the
third machine's worker recovers it, and the live stream carries on unbroken to the run's
real end, in the submitted trace (spans of both claims reach a real OTLP receiver). Then
a thread's busy policies across machines (enqueue, interrupt), a cancel sent through
another machine than the one that submitted, and a deleted thread answering 410 from
every machine, before and after a sweep.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from typing import AsyncIterator, Iterator

import httpx
import pytest

import runwright as rw

from ..otlp_receiver import OtlpReceiver
from .harness import ROOT, ServerProcess, WorkerFleet, start_server, wait_until

pytestmark = pytest.mark.process
APP = "tests.process.exit_apps:app"
TOKEN = {"Authorization": "Bearer acme-token"}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
async def servers(store_url: str, fleet: WorkerFleet, receiver: OtlpReceiver,
                  app: rw.App) -> AsyncIterator[list[str]]:
    env = {"RUNWRIGHT_TOKENS": "acme-token=acme", "RUNWRIGHT_TEST_LEDGER": str(fleet.ledger),
           **receiver.env()}
    started: list[ServerProcess] = [start_server(store_url, fleet.logs, APP, env) for _ in range(3)]
    try:
        yield [await server.wait_listening() for server in started]
    finally:
        for server in started:
            server.kill()
        print("\n".join(f"----- server {s.log_path.stem} -----\n{s.log()}" for s in started))


async def _stream(base: str, run_id: int, after: int = 0) -> list[tuple[int, str]]:
    """(seq, event) of a run's SSE stream through `base`, until the stream ends."""
    seen: list[tuple[int, str]] = []
    headers = {**TOKEN, **({"Last-Event-ID": str(after)} if after else {})}
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(30, read=120)) as http:
        async with http.stream("GET", f"/runs/{run_id}/events/stream", headers=headers) as stream:
            assert stream.status_code == 200
            seq = 0
            async for line in stream.aiter_lines():
                if line.startswith("id: "):
                    seq = int(line[4:])
                elif line.startswith("event: ") and seq:
                    seen.append((seq, line[7:]))
    return seen


async def _state(http: httpx.AsyncClient, run_id: int, *states: str) -> dict | None:
    run = (await http.get(f"/runs/{run_id}", headers=TOKEN)).json()
    return run if run["state"] in states else None


@pytest.mark.parametrize("backend", ["postgres"])
async def test_three_machines_one_run_through_a_sigkill_and_a_thread_across_them(
        servers: list[str], fleet: WorkerFleet, receiver: OtlpReceiver, store_url: str) -> None:
    first, second, third = (httpx.AsyncClient(base_url=b, timeout=60) for b in servers)
    try:
        await _one_run_through_a_kill(servers, first, fleet, receiver)
        thread_runs = await _a_thread_across_machines(first, second, third, fleet)
        await _a_deleted_thread_everywhere(first, second, third, store_url, thread_runs)
    finally:
        for http in (first, second, third):
            await http.aclose()


async def _one_run_through_a_kill(servers: list[str], first: httpx.AsyncClient, fleet: WorkerFleet,
                                  receiver: OtlpReceiver) -> None:
    trace_hex = secrets.token_hex(16)
    executing = fleet.start(env=receiver.env(), app_spec=APP)  # the second machine's worker
    submitted = await first.post("/runs", headers={**TOKEN, "traceparent": f"00-{trace_hex}-{'ab' * 8}-01"},
                                 json={"task": "traced_steps",
                                       "args": {"secret": "x", "steps": 3, "gate": 1}})
    assert submitted.status_code == 201, submitted.text
    run_id = submitted.json()["id"]
    live = asyncio.create_task(_stream(servers[2], run_id))  # through the third machine
    await wait_until(lambda: ("gate-1", run_id, 1, executing.pid) in fleet.ledger_lines(),
                     "the second machine's worker waits at step 1's gate")
    executing.kill()  # kill -9
    recovering = fleet.start(env=receiver.env(), app_spec=APP)  # the third machine's worker
    fleet.open_gate(run_id, 1)
    seen = await asyncio.wait_for(live, 180)
    seqs = [seq for seq, _ in seen]
    assert seqs == list(range(1, len(seqs) + 1)), f"an unbroken stream: {seqs}"
    assert seen[-1][1] == "succeeded" and [e for _, e in seen].count("started") == 2, seen
    run = (await first.get(f"/runs/{run_id}", headers=TOKEN)).json()
    assert (run["state"], run["last_seq"]) == ("succeeded", len(seqs))
    assert run["traceparent"].split("-")[1] == trace_hex
    steps = {(pid, name) for name, rid, _, pid in fleet.ledger_lines() if rid == run_id}
    assert ("step-2", recovering.pid) in {(n, p) for p, n in steps}, "recovered elsewhere"
    # Replayed from a seq through the first machine: the same events after it.
    assert await _stream(servers[0], run_id, after=2) == seen[2:]

    def both_claims() -> set[int]:
        fences = {s.attributes.get("runwright.fence") for s in receiver.received()
                  if s.trace_id == trace_hex and s.name == "attempt traced_steps"}
        return fences if fences == {1, 2} else set()

    await wait_until(both_claims, "the spans of both claims reach the receiver, in the submitted trace")


async def _a_thread_across_machines(first: httpx.AsyncClient, second: httpx.AsyncClient,
                                    third: httpx.AsyncClient, fleet: WorkerFleet) -> list[int]:
    def submit(http: httpx.AsyncClient, on_busy: str, tag: str):  # type: ignore[no-untyped-def]
        return http.post("/runs", headers=TOKEN, json={"task": "ticking", "args": {"tag": tag},
                                                        "thread": "t", "on_busy": on_busy})

    busy = (await submit(second, "reject", "a")).json()
    await wait_until(lambda: _state(third, busy["id"], "running"), "the thread's run runs")
    waiting = (await submit(third, "enqueue", "b")).json()
    assert (await _state(first, waiting["id"], "queued")) is not None, "enqueued behind the busy run"
    jumping = (await submit(first, "interrupt", "c")).json()
    assert await wait_until(lambda: _state(second, busy["id"], "interrupted"), "the busy run is interrupted")
    # The interrupting run goes ahead of the one waiting, which runs after it.
    await wait_until(lambda: _state(second, jumping["id"], "running"), "the interrupting run runs")
    assert (await _state(third, waiting["id"], "queued")) is not None, "the waiting run still waits"
    started = {rid for name, rid, _, _ in fleet.ledger_lines() if name.startswith("tick-")}
    assert waiting["id"] not in started, "the enqueued run never overlapped the busy one"
    assert (await third.post(f"/runs/{jumping['id']}/cancel", headers=TOKEN)).status_code == 200
    assert await wait_until(lambda: _state(first, jumping["id"], "cancelled"),
                            "cancelled through another machine than the one that submitted it")
    await wait_until(lambda: _state(second, waiting["id"], "running"), "the waiting run runs next")
    assert (await first.post(f"/runs/{waiting['id']}/cancel", headers=TOKEN)).status_code == 200
    assert await wait_until(lambda: _state(third, waiting["id"], "cancelled"), "and is cancelled")
    return [busy["id"], waiting["id"], jumping["id"]]


async def _a_deleted_thread_everywhere(first: httpx.AsyncClient, second: httpx.AsyncClient,
                                       third: httpx.AsyncClient, store_url: str,
                                       thread_runs: list[int]) -> None:
    assert (await second.delete("/threads/t", headers=TOKEN)).status_code == 204
    for http in (first, second, third):
        answer = await http.get("/threads/t/messages", headers=TOKEN)
        assert answer.status_code == 410 and answer.json()["title"] == "Thread deleted", answer.text
    swept = subprocess.run([sys.executable, "-m", "runwright", "sweep", "--url", store_url,
                            "--max-age-s", "0.01"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert swept.returncode == 0, swept.stderr
    for http in (first, second, third):
        answer = await http.get("/threads/t/messages", headers=TOKEN)
        assert answer.status_code == 410, answer.text
        for run_id in thread_runs:  # reclaimed: expired, not unknown
            assert (await http.get(f"/runs/{run_id}", headers=TOKEN)).status_code == 410
