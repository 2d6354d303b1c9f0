"""`runwright verify --fleet` against a fleet already running: real `runwright worker`
processes of the user's app, kept alive by a small supervisor as systemd would (a worker
that dies is started again), on every backend.

With faults allowed (--allow-verify-faults) a short run exits 0 with no violation and
every kind of fault landed (kills counted once their replacement came up; SQLite has no
sessions to cut: its blips are skipped); afterwards the session's queue is served no more
and none of verify's runs is left. With faults not allowed, the workload still runs and is
checked, the faults are reported skipped, exit 0. With no fleet running: one line, exit 8.
Interrupted (SIGINT): exit 130, the queue released and its runs removed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import runwright as rw
from runwright.verify._serving import QUEUE_PREFIX

from . import verify_fleet_app
from .harness import ROOT, outputs, sigstop_outside_a_write, wait_until

# Three workers of 8 slots and verify, each with its pool (of 4, PG_POOL below): on
# PostgreSQL the whole budget of connections (tests/pg_budget.py).
pytestmark = pytest.mark.pg_connections(50)

FAST = {"RUNWRIGHT_FLEET_HEARTBEAT_S": "0.25", "RUNWRIGHT_FLEET_STALE_S": "3", "RUNWRIGHT_FLEET_TTL_S": "8"}
APP_SPEC = "tests.process.verify_fleet_app:app"
SHORT = ["--runs", "200", "--kill-every", "2s", "--stall-every", "2s", "--blip-every", "3s",
         "--seed", "7", "--timeout-s", "240"]
WORKERS = 3
STALLED_CONCURRENCY = 8  # each worker's -c: what a stopped worker can hold
VERIFY_WITHIN_S = 420  # a run takes under a minute; this is under pytest's 600 s with the fleet's start


# On PostgreSQL each process of the fleet and verify keep a pool of 4 sessions, not 10: with
# their own sessions (LISTEN, liveness, fleet bus) four processes with full pools held 61
# connections on a loaded machine, more than the suite's budget (tests/pg_budget.py).
PG_POOL = "pool_size=4"


def env_of(store_url: str, **extra: str) -> dict[str, str]:
    url = f"{store_url}&{PG_POOL}" if store_url.startswith("postgresql:") else store_url
    return {**os.environ, **FAST, "RUNWRIGHT_URL": url, "RUNWRIGHT_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT), **extra}


class Supervisor:
    """`size` worker processes, each started again when it dies (as systemd's
    Restart=always would), until `stop()`."""

    def __init__(self, store_url: str, logs: Path, size: int, faults: bool) -> None:
        self.env = env_of(store_url)
        self.args = ["--allow-verify-faults"] if faults else []
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        for slot in range(size):
            self.procs.append(self._start(slot))
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _start(self, slot: int) -> subprocess.Popen[bytes]:
        with open(self.logs / f"worker-{slot}.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "runwright", "worker", APP_SPEC, "-c", str(STALLED_CONCURRENCY),
                 "--lease-s", "2", "--drain-grace-s", "1", *self.args],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                for slot, proc in enumerate(self.procs):
                    if proc.poll() is not None:
                        self.restarts += 1
                        self.procs[slot] = self._start(slot)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def logs_text(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.logs.glob("worker-*.log")))


def migrate(store_url: str) -> None:
    subprocess.run([sys.executable, "-m", "runwright", "migrate", "--url", store_url], check=True,
                   cwd=ROOT, env=env_of(store_url), capture_output=True)


async def ready_workers(store_url: str) -> int:
    app = rw.App(store_url, auto_migrate=False)
    try:
        return sum(1 for row in await app.fleet.workers()
                   if row["kind"] == "worker" and row["state"] == "ready")
    finally:
        await app.close()


@pytest.fixture
def fleet_of(store_url: str, tmp_path: Path) -> Iterator[Any]:
    made: list[Supervisor] = []

    async def start(faults: bool) -> Supervisor:
        migrate(store_url)
        logs = tmp_path / "logs"
        logs.mkdir(exist_ok=True)
        made.append(Supervisor(store_url, logs, WORKERS, faults))
        await wait_until(lambda: _all_ready(store_url), f"{WORKERS} workers ready",
                         timeout_s=120, interval_s=0.3)
        return made[-1]

    yield start
    for supervisor in made:
        supervisor.stop()


async def _all_ready(store_url: str) -> bool:
    return await ready_workers(store_url) >= WORKERS


def verify(store_url: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "runwright", "verify", "--fleet", *args],
                            cwd=ROOT, env=env_of(store_url), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes], supervisor: Supervisor | None = None) -> tuple[str, str]:
    logs = "" if supervisor is None else supervisor.logs_text
    try:
        out, err = outputs(proc, VERIFY_WITHIN_S)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{logs() if logs else ''}"[-10000:]) from None
    return out, err + (logs() if logs else "")


async def verify_left(store_url: str) -> dict[str, Any]:
    """What a finished verify left: its runs (by queue), its ledger holder's registration."""
    app = rw.App(store_url, auto_migrate=False)
    try:
        stats = await app.queue_stats()
        workers = await app.list_workers()
        return {"runs": sum(n for queue, _, n, _ in stats if queue.startswith(QUEUE_PREFIX)),
                "holders": [w for w in workers if w.queues and w.queues[0].startswith(QUEUE_PREFIX)]}
    finally:
        await app.close()


async def still_served(store_url: str, queue: str) -> bool:
    """Whether a worker still takes runs of `queue`: one of the app's own, on that queue,
    must stay queued while every worker polls it a few times over."""
    app = rw.App(store_url, auto_migrate=False)
    app.tasks["hello"] = verify_fleet_app.hello
    try:
        handle = await app.submit("hello", queue=queue, priority=rw.CRITICAL)  # ahead of a backlog
        await asyncio.sleep(4)  # the workers poll every second, and are woken by the submission
        (run,) = await app.read_runs([handle.id])
        if run.state is rw.RunState.QUEUED:
            await app.cancel(handle.id)  # not to be taken later by a worker of that queue
        return run.state is not rw.RunState.QUEUED
    finally:
        await app.close()


async def test_verify_fleet_passes_under_faults_and_leaves_nothing(backend, store_url, fleet_of):
    supervisor = await fleet_of(faults=True)
    out, err = finish(verify(store_url, *SHORT, "--json"), supervisor)
    assert out, err[-6000:]
    report = json.loads(out)
    assert report["mode"] == "fleet" and report["ok"], (report["violations"], report["examples"],
                                                        err[-4000:])
    runs, faults = report["runs"], report["faults"]
    assert runs["checked"] >= runs["submitted"] == 200 and runs["finished"] == runs["checked"]
    assert report["fleet"]["workers_serving"] >= WORKERS
    assert report["fleet"]["workers_obeying_faults"] >= 1
    assert faults["kills"] >= 1 and faults["stalls"] >= 1, (faults, report["applied"])
    assert faults["not_restarted"] == 0, faults
    assert supervisor.restarts >= faults["kills"], "each kill counted was a real death and restart"
    if backend == "sqlite":  # no sessions to cut: each blip is refused, and said so
        assert faults["blips"] == 0 and any("SQLite" in why for why in faults["skipped_why"]), faults
    else:
        assert faults["blips"] >= 1, faults
    assert report["steps"]["executed"] >= report["steps"]["journaled"] > 0
    left = await verify_left(store_url)
    assert left == {"runs": 0, "holders": []}, left
    assert not await still_served(store_url, report["fleet"]["queue"])


@pytest.mark.parametrize("backend", ["postgres"])
async def test_verify_fleet_without_faults_allowed_still_checks_and_skips_them(backend, store_url,
                                                                                fleet_of):
    supervisor = await fleet_of(faults=False)
    out, err = finish(verify(store_url, *SHORT, "--json"), supervisor)
    assert out, err[-6000:]
    report = json.loads(out)
    assert report["ok"] and report["fleet"]["workers_obeying_faults"] == 0, err[-6000:]
    faults = report["faults"]
    assert faults["kills"] == faults["stalls"] == faults["blips"] == 0, faults
    assert faults["skipped"] >= 3 and "--allow-verify-faults" in " ".join(faults["skipped_why"]), faults
    assert supervisor.restarts == 0, "no worker was made to die"
    assert report["runs"]["finished"] == report["runs"]["checked"] >= 200
    assert (await verify_left(store_url))["runs"] == 0
    # Whoever reaches the bus cannot kill a worker that did not opt in, even in a session.
    app = rw.App(store_url, auto_migrate=False)
    try:
        queue = f"{QUEUE_PREFIX}intruder"
        served = await app.fleet.broadcast("verify-serve", {"queue": queue, "for_s": 30})
        assert [row.outcome.value for row in served] == ["applied"] * WORKERS, served
        rows = await app.fleet.broadcast("verify-fault", {"queue": queue, "kind": "die"})
        assert [row.outcome.value for row in rows] == ["failed"] * WORKERS, rows
        assert all("--allow-verify-faults" in (row.error or "") for row in rows), rows
        await app.fleet.broadcast("verify-release", {"queue": queue})
    finally:
        await app.close()
    await asyncio.sleep(1)
    assert supervisor.restarts == 0 and all(proc.poll() is None for proc in supervisor.procs)


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_verify_fleet_with_no_fleet_running_says_so_in_one_line(backend, store_url):
    migrate(store_url)
    proc = verify(store_url, "--runs", "10")
    out, err = finish(proc)
    assert proc.returncode == 8, err
    lines = [line for line in err.splitlines() if line.strip() and "runwright verify" not in line]
    assert len(lines) == 1 and "no process of fleet runwright:v0" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("backend", ["postgres"])
async def test_verify_fleet_interrupted_releases_the_queue_and_removes_its_runs(backend, store_url,
                                                                                 fleet_of):
    await fleet_of(faults=True)
    proc = verify(store_url, "--runs", "3000", "--kill-every", "0", "--stall-every", "0",
                  "--blip-every", "3s", "--seed", "3")

    async def some_runs() -> bool:
        return (await verify_left(store_url))["runs"] > 100

    await wait_until(some_runs, "verify's runs are in the store", timeout_s=120, interval_s=0.3)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc)
    assert proc.returncode == 130, err[-3000:]
    queue = next(word for word in err.split() if word.startswith(QUEUE_PREFIX)).rstrip(":")
    assert await verify_left(store_url) == {"runs": 0, "holders": []}
    assert not await still_served(store_url, queue)


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_verify_killed_outright_stops_being_served_when_its_session_lapses(backend, store_url,
                                                                                    fleet_of):
    """SIGKILL leaves verify no clean-up: the workers stop serving its queue on their own
    once its last renewal lapses (SERVE_FOR_S), so nothing more of it runs."""
    await fleet_of(faults=False)
    proc = verify(store_url, "--runs", "3000", "--kill-every", "0", "--stall-every", "0",
                  "--blip-every", "0", "--seed", "5")

    async def some_runs() -> bool:
        return (await verify_left(store_url))["runs"] > 100

    await wait_until(some_runs, "verify's runs are in the store", timeout_s=120, interval_s=0.3)
    proc.kill()
    _, err = finish(proc)
    queue = next(word for word in err.split() if word.startswith(QUEUE_PREFIX)).rstrip(":")
    assert await still_served(store_url, queue), "served while its renewal holds"

    async def lapsed() -> bool:
        return not await still_served(store_url, queue)

    await wait_until(lapsed, "the workers stop serving the dead session's queue", timeout_s=120,
                     interval_s=0.5)


async def ledger_state(store_url: str) -> rw.RunState | None:
    """The state of the running verify session's ledger run (None before it exists)."""
    app = rw.App(store_url, auto_migrate=False)
    try:
        queues = {queue for queue, _, _, _ in await app.queue_stats()
                  if queue.startswith(QUEUE_PREFIX) and queue.endswith(".ledger")}
        runs = [run for queue in queues for run in await app.list_runs(queue=queue, limit=5)]
        return runs[0].state if runs else None
    finally:
        await app.close()


@pytest.mark.parametrize("backend", ["redis"])
async def test_a_verify_the_fleet_declared_dead_aborts_instead_of_reporting(backend, store_url,
                                                                            fleet_of):
    """Stopped past its liveness (on Redis a key that lapses while the process is stopped),
    verify is taken for dead: a worker's rescuer takes its ledger run back, so the workers'
    ledger lines are refused from then on. Woken, verify must not print figures it cannot
    know: one line, exit 1, and its runs still removed."""
    await fleet_of(faults=False)
    proc = verify(store_url, "--runs", "3000", "--kill-every", "0", "--stall-every", "0",
                  "--blip-every", "0", "--seed", "11")

    async def some_runs() -> bool:
        if proc.poll() is not None:  # say why at once, not after the wait's deadline
            out, err = proc.communicate()
            raise AssertionError(f"verify ended (exit {proc.returncode}) before it was stopped:\n"
                                 f"{out.decode()[-3000:]}\n{err.decode()[-3000:]}")
        return (await verify_left(store_url))["runs"] > 100 and \
            await ledger_state(store_url) is rw.RunState.RUNNING

    try:
        await wait_until(some_runs, "verify's runs are in the store", timeout_s=120, interval_s=0.3)
        proc.send_signal(signal.SIGSTOP)
        try:
            async def taken_back() -> bool:
                return await ledger_state(store_url) is not rw.RunState.RUNNING

            await wait_until(taken_back, "the fleet takes verify's ledger run back", timeout_s=60,
                             interval_s=0.3)
        finally:
            proc.send_signal(signal.SIGCONT)
    except BaseException:
        proc.kill()  # and its pipes closed: left to the collector they warn in a later test
        proc.communicate()
        raise
    out, err = finish(proc)
    assert proc.returncode == 1, err[-3000:]
    assert "declared this verify session dead" in err and "Traceback" not in err, err[-3000:]
    assert not out.strip(), "no report of figures"
    assert (await verify_left(store_url))["runs"] == 0


async def ready_pid(store_url: str, pid: int) -> str | None:
    """The slot name of worker process `pid` once it reads ready (None before)."""
    app = rw.App(store_url, auto_migrate=False)
    try:
        return next((row["name"] for row in await app.fleet.workers()
                     if row["pid"] == pid and row["state"] == "ready"), None)
    finally:
        await app.close()


async def test_a_worker_stalled_across_the_end_of_a_session_takes_nothing_of_its_queue(backend, store_url,
                                                                                       fleet_of):
    """A worker stopped (SIGSTOP) while the session ends wakes still serving it as far as it
    knows (its last renewal has not lapsed; the end's release reached it stopped, or not at
    all): the end is durable in the store, so it takes nothing of that queue, not even a run
    submitted there after the end, while it takes work again (a run of a queue it alone was
    told to serve since)."""
    supervisor = await fleet_of(faults=False)
    stalled = supervisor.procs[0]
    proc = verify(store_url, "--runs", "3000", "--kill-every", "0", "--stall-every", "0",
                  "--blip-every", "0", "--seed", "13")

    async def some_runs() -> bool:
        return (await verify_left(store_url))["runs"] > 100

    await wait_until(some_runs, "verify's runs are in the store", timeout_s=120, interval_s=0.3)
    app = rw.App(store_url, auto_migrate=False)
    app.tasks["hello"] = verify_fleet_app.hello
    try:
        # It serves the session: every ready worker took it. Stopped outside a write: on
        # SQLite a worker stopped inside one keeps the one write lock, and verify's end
        # (which removes its runs) would wait on it for ever.
        await sigstop_outside_a_write(stalled, store_url)
        try:
            proc.send_signal(signal.SIGINT)
            _, err = finish(proc)
            assert proc.returncode == 130, err[-3000:]
            queue = next(word for word in err.split() if word.startswith(QUEUE_PREFIX)).rstrip(":")
            probe = await app.submit("hello", queue=queue, priority=rw.CRITICAL)
        finally:
            stalled.send_signal(signal.SIGCONT)
        name = await wait_until(lambda: ready_pid(store_url, stalled.pid), "the woken worker reads ready",
                                timeout_s=60, interval_s=0.2)
        control = f"{QUEUE_PREFIX}control"
        rows = await app.fleet.broadcast("verify-serve", {"queue": control, "for_s": 120}, targets=[name])
        assert [row.outcome.value for row in rows] == ["applied"], rows
        taken = await app.submit("hello", queue=control)
        assert await taken.result(timeout_s=60) == "hello world"  # it claims again, that queue with it
        (run,) = await app.read_runs([probe.id])
        events = await app.events_page(probe.id)
        assert run.state is rw.RunState.QUEUED and not any(e.kind == "started" for e in events), (
            run, events)
        # The probe and the control, and of verify's own only those it said it could not
        # remove: a run the stopped worker held when the session ended is cancelled, but it
        # ends only once that worker wakes (or its lease lapses), after verify has gone.
        held = re.search(r"(\d+) of verify's runs could not be removed yet", err)
        left = int(held.group(1)) if held else 0
        assert left <= STALLED_CONCURRENCY, err[-3000:]
        assert (await verify_left(store_url))["runs"] == 2 + left
        await app.fleet.broadcast("verify-release", {"queue": control})
    finally:
        await app.close()
