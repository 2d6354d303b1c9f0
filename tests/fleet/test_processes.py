"""The fleet with real worker processes, on every transport: SIGKILL, SIGSTOP, a slow
handler, a boot resync, two majors, a boot rule, and rolling recycles under load."""

from __future__ import annotations

import asyncio
import signal
import time

import asyncpg
import pytest
import redis.asyncio

import runwright as rw
from runwright.fleet import Outcome

from ..process.harness import wait_until
from .conftest import Processes


async def ready_rows(app: rw.App, count: int, kind: str = "worker") -> list[dict]:
    """Until `count` processes of `kind` read ready; their rows."""
    async def check() -> list[dict] | None:
        rows = [r for r in await app.fleet.workers() if r["kind"] == kind and r["state"] == "ready"]
        return rows if len(rows) >= count else None

    return await wait_until(check, f"{count} {kind} processes read ready", timeout_s=90)


def name_of(rows: list[dict], pid: int) -> str:
    return next(r["name"] for r in rows if r["pid"] == pid)


async def test_a_slow_handler_reads_timed_out_and_a_sigkill_mid_broadcast_departed(
        client, processes: Processes):
    survivor, victim = processes.start(), processes.start()
    rows = await ready_rows(client, 2)
    report = await client.fleet.broadcast("hold", {"s": 30}, timeout_s=2)
    assert [r.outcome for r in report] == [Outcome.TIMED_OUT, Outcome.TIMED_OUT]
    (processes.ledger / f"held-{victim.pid}").unlink()
    window_s = 120.0
    began = time.monotonic()
    sending = asyncio.create_task(client.fleet.broadcast(
        "hold", {"s": 600}, timeout_s=window_s, targets=[name_of(rows, victim.pid)]))
    await wait_until(lambda: (processes.ledger / f"held-{victim.pid}").exists(), "its handler began")
    victim.kill()
    [row] = await sending
    assert (row.name, row.outcome) == (name_of(rows, victim.pid), Outcome.DEPARTED)
    # Reported when the census showed its life gone, not at the window's end.
    assert time.monotonic() - began < window_s
    # Its row may outlive it (its TTL): a later broadcast reads that life as departed.
    after = {r.name: r.outcome for r in await client.fleet.broadcast("ping", timeout_s=10)}
    assert after.pop(name_of(rows, victim.pid), Outcome.DEPARTED) is Outcome.DEPARTED
    assert after == {name_of(rows, survivor.pid): Outcome.APPLIED}


async def test_a_process_sigkilled_mid_apply_reads_departed_at_the_next_look_not_at_the_deadline(
        client, processes: Processes):
    """Its handler blocks the process (a sync handler holding its loop) when it is
    SIGKILLed: its row is still within its TTL (long here), yet its life has ended, and
    the census read once per heartbeat says so."""
    survivor = processes.start()
    victim = processes.start(env={"RUNWRIGHT_FLEET_TTL_S": "300"})
    rows = await ready_rows(client, 2)
    victim_name = name_of(rows, victim.pid)
    window_s = 60.0
    sending = asyncio.create_task(client.fleet.broadcast(
        "block", timeout_s=window_s, targets=[victim_name]))
    await wait_until(lambda: (processes.ledger / f"held-{victim.pid}").exists(), "its handler began")
    victim.kill()
    victim.wait()  # reaped, as any supervisor does
    killed = time.monotonic()
    [row] = await sending
    assert (row.name, row.outcome) == (victim_name, Outcome.DEPARTED)
    # Ended on the departure: a window's end, or the row's TTL, is far later.
    assert time.monotonic() - killed < window_s / 2
    # Its row outlives it (its TTL): a later broadcast reads that life as departed at
    # once, whether or not its row is past the freshness gate, and never waits for it.
    began = time.monotonic()
    after = {r.name: r.outcome for r in await client.fleet.broadcast("ping", timeout_s=window_s)}
    assert time.monotonic() - began < window_s / 2
    assert after == {name_of(rows, survivor.pid): Outcome.APPLIED, victim_name: Outcome.DEPARTED}


async def test_a_stopped_process_reads_missing_then_stale_and_keeps_its_life(client, processes):
    running, stopped = processes.start(), processes.start()
    rows = await ready_rows(client, 2)
    stopped_name = name_of(rows, stopped.pid)
    generation = next(r["generation"] for r in rows if r["pid"] == stopped.pid)
    try:
        stopped.send_signal(signal.SIGSTOP)
        report = {r.name: r.outcome for r in await client.fleet.broadcast("ping", timeout_s=1)}
        assert report == {name_of(rows, running.pid): Outcome.APPLIED, stopped_name: Outcome.MISSING}
        await wait_until(lambda: _reads(client, stopped_name, "stale"), "it reads stale")
        report = {r.name: r.outcome for r in await client.fleet.broadcast("ping", timeout_s=1)}
        assert report[stopped_name] is Outcome.STALE
    finally:
        stopped.send_signal(signal.SIGCONT)
    # Woken within the TTL: the same life (name and generation), ready again.
    row = await wait_until(lambda: _reads(client, stopped_name, "ready"), "it reads ready again")
    assert row["generation"] == generation and row["pid"] == stopped.pid


async def test_a_process_in_its_boot_resync_reads_resyncing(client, processes):
    processes.start()
    await ready_rows(client, 1)
    slow = processes.start(env={"FLEET_TEST_RESYNC_S": "600"})
    row = await wait_until(lambda: _pid_reads(client, slow.pid, "resyncing"), "it is resyncing")
    report = await client.fleet.broadcast("ping", timeout_s=5)
    assert {r.name: r.outcome for r in report}[row["name"]] is Outcome.RESYNCING
    assert [r.outcome for r in report].count(Outcome.APPLIED) == 1


async def test_a_process_whose_bus_dropped_reads_resyncing_until_it_resynced(
        client, processes, backend, store_url):
    if backend == "sqlite":
        pytest.skip("SQLite's bus is a table every process polls: a failed poll loses no message")
    proc = processes.start()
    await ready_rows(client, 1)
    hold = processes.ledger / "hold-resync"
    hold.touch()  # the reconnect resync waits while this exists
    await _cut_bus(backend, store_url, proc.pid)
    row = await wait_until(lambda: _pid_reads(client, proc.pid, "resyncing"), "it reads resyncing")
    report = await client.fleet.broadcast("ping", timeout_s=5)
    assert [(r.name, r.outcome) for r in report] == [(row["name"], Outcome.RESYNCING)]
    hold.unlink()
    again = await wait_until(lambda: _pid_reads(client, proc.pid, "ready"), "it reads ready again")
    assert (again["name"], again["generation"]) == (row["name"], row["generation"])  # the same life
    report = await client.fleet.broadcast("ping", timeout_s=10)
    assert [(r.name, r.outcome) for r in report] == [(row["name"], Outcome.APPLIED)]


async def _cut_bus(backend: str, store_url: str, pid: int) -> None:
    """Drop the subscription of the process `pid` (its LISTEN session, or pub/sub client),
    leaving its store's other connections be. On PostgreSQL the fleet LISTENs on the
    store's own session, which holds the worker's liveness mark too (retaken at once)."""
    if backend == "postgres":
        conn = await asyncpg.connect(store_url.split("?", 1)[0])
        try:
            cut = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1"
                " AND (query LIKE 'LISTEN%' OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                " AND objsubid = 2 AND granted AND objid::bigint > 0))", f"runwright:%:{pid}")
        finally:
            await conn.close()
    else:
        client = redis.asyncio.Redis.from_url(store_url.split("?", 1)[0], decode_responses=True)
        try:
            clients = await client.client_list()
            cut = [await client.client_kill_filter(_id=c["id"]) for c in clients
                   if c.get("name") == f"runwright-fleet:{pid}" and int(c.get("sub", 0)) > 0]
        finally:
            await client.aclose()
    assert cut, "no bus subscription of that process was found"


async def test_two_majors_on_one_namespace_are_two_fleets(client, processes):
    v1 = processes.start()
    v2 = processes.start(env={"FLEET_TEST_VERSION": "2.3.1"})
    await ready_rows(client, 1)
    other = rw.App(client.url, version="2.0.0")
    try:
        await ready_rows(other, 1)
        mine = await client.fleet.broadcast("whoami", timeout_s=10)
        theirs = await other.fleet.broadcast("whoami", timeout_s=10)
    finally:
        await other.close()
    assert [(r.name, r.outcome, r.detail["pid"]) for r in mine] == [("worker-1", Outcome.APPLIED, v1.pid)]
    assert [(r.name, r.outcome, r.detail["pid"]) for r in theirs] == [("worker-1", Outcome.APPLIED, v2.pid)]


async def test_a_window_below_three_drain_budgets_refuses_to_start(client, processes):
    proc = processes.start(env={"RUNWRIGHT_FLEET_APPLY_WINDOW_S": "20"}, drain_grace_s=10)
    await wait_until(lambda: proc.poll() is not None, "the worker exits")
    assert proc.returncode == 2
    assert "RUNWRIGHT_FLEET_APPLY_WINDOW_S" in processes.log_of(proc)
    assert await client.fleet.workers() == []


async def _reads(app: rw.App, name: str, state: str) -> dict | None:
    row = next((r for r in await app.fleet.workers() if r["name"] == name), None)
    return row if row is not None and row["state"] == state else None


async def _pid_reads(app: rw.App, pid: int, state: str) -> dict | None:
    row = next((r for r in await app.fleet.workers() if r["pid"] == pid), None)
    return row if row is not None and row["state"] == state else None


async def test_a_paused_queue_is_claimed_by_no_worker_including_later_ones(client, processes):
    processes.start()
    await ready_rows(client, 1)
    report = await client.fleet.broadcast("pause-queue", {"queue": "default"}, timeout_s=10)
    assert [r.outcome for r in report] == [Outcome.APPLIED]
    processes.start()  # started after the pause: reads it in its boot resync
    await ready_rows(client, 2)
    handle = await client.submit("work", n=7)
    # An absence can only be watched for a while: several claim polls (1 s) and fleet
    # heartbeats of both workers pass, and the run is still waiting.
    await asyncio.sleep(3)
    assert (await client.get(handle.id)).run.state.value == "queued"
    report = await client.fleet.broadcast("resume-queue", {"queue": "default"}, timeout_s=10)
    assert [r.outcome for r in report] == [Outcome.APPLIED, Outcome.APPLIED]
    assert await handle.result(timeout_s=60) == 7


async def test_a_worker_stopped_while_a_queue_was_paused_never_claims_from_it(client, processes):
    """SIGSTOP a worker, pause its queue (it misses the op), submit to the queue, SIGCONT:
    the wakened worker holds claims and notifications it had not read, and a heartbeat that
    has not re-read the paused set yet. The store's claim skips the queue all the same."""
    worker = processes.start()
    rows = await ready_rows(client, 1)
    name = name_of(rows, worker.pid)
    try:
        worker.send_signal(signal.SIGSTOP)
        report = await client.fleet.broadcast("pause-queue", {"queue": "default"}, timeout_s=1)
        assert [(r.name, r.outcome) for r in report] == [(name, Outcome.MISSING)]
        handles = [await client.submit("work", n=n) for n in range(5)]
    finally:
        worker.send_signal(signal.SIGCONT)
    woken_at = time.time()
    # Awake: a fresh heartbeat since SIGCONT (its re-read of the paused set comes with it),
    # then a few claim polls and notifications more; no run of the paused queue started.
    await wait_until(lambda: _beat_since(client, name, woken_at), "it heartbeats again")
    await asyncio.sleep(1.5)
    runs = [(await client.get(h.id)).run for h in handles]
    assert [r.state.value for r in runs] == ["queued"] * 5
    assert not list(processes.ledger.glob("*.log")), "a run of the paused queue was executed"
    report = await client.fleet.broadcast("resume-queue", {"queue": "default"}, timeout_s=10)
    assert [(r.name, r.outcome) for r in report] == [(name, Outcome.APPLIED)]
    assert [await h.result(timeout_s=60) for h in handles] == list(range(5))


async def _beat_since(app: rw.App, name: str, at: float) -> dict | None:
    row = next((r for r in await app.fleet.workers() if r["name"] == name), None)
    fresh = row is not None and row["state"] == "ready" and row["heartbeat_age_s"] < time.time() - at
    return row if fresh else None
