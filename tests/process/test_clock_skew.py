"""Clock skew between machines changes nothing: leases are judged by the store's clock.

A worker process runs under libfaketime (Debian's `faketime`) with its clock a minute
off. Ahead, its rescuer must not find a live worker's leases lapsed; behind, it must
still take over a dead worker's runs, and lease what it claims so that the database (and
every other worker) sees the lease live. SQLite is one machine, one clock: not applicable.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runwright as rw
from runwright.runs import Run, RunState

from . import apps
from .harness import APP_SPEC, DEADLINE_S, ROOT, WorkerFleet, WorkerProcess, runs_of, wait_until
from .test_workers import all_done, all_in

LEASE_S = 20.0  # a third of the skew: judged by the skewed clock, a lease is lapsed at once
SKEW_S = 60


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose clock is `offset` ("+60s") from ours."""
    libraries = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    assert libraries, "libfaketime is missing (scripts/test installs Debian's faketime)"
    env = {"LD_PRELOAD": libraries[0], "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    seen = float(subprocess.run([sys.executable, "-c", "import time; print(time.time())"], env=env,
                                capture_output=True, text=True, check=True).stdout)
    assert abs(seen - time.time() - float(offset.rstrip("s"))) < SKEW_S / 4, "the clock is skewed"
    return env


@pytest.fixture(autouse=True)
def _not_on_sqlite(backend: str) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite is one machine: its workers share one clock, there is no skew")


async def test_a_rescuer_whose_clock_runs_ahead_takes_over_no_live_run(
        app: rw.App, fleet: WorkerFleet) -> None:
    owner = fleet.start(lease_s=LEASE_S)
    await owner.wait_started()
    handles = await app.submit_many(apps.hold, [{"tag": "skew"}] * 3)
    held = await wait_until(lambda: all_in(app, handles, {RunState.RUNNING}), "the runs are running")
    ahead = fleet.start(lease_s=LEASE_S, env=skewed(f"+{SKEW_S}s"))
    await ahead.wait_started()
    # Rescue ticks every 0.5 s and heartbeats every 2 s: by its fourth heartbeat it has
    # judged the owner's leases a dozen times, and the owner has renewed them meanwhile.
    await _heartbeats(app, ahead, 4)

    now = await runs_of(app, handles)
    assert [(r.state, r.fence, r.recoveries, r.owner) for r in now] == [
        (RunState.RUNNING, r.fence, 0, r.owner) for r in held], "no live run was taken over"
    assert {run_id: len(starts) for run_id, starts in fleet.events_by_run("start").items()} == {
        r.id: 1 for r in held}, "each run started once, by its owner"

    # And it does take over what is really dead: its rescuer works, it was only not fooled.
    owner.signal(signal.SIGKILL)
    assert await owner.wait_exit() == -signal.SIGKILL
    fleet.release("skew")
    runs = await wait_until(lambda: all_done(app, handles), "the dead owner's runs end")
    assert [(r.state, r.recoveries, r.value()["pid"]) for r in runs] == [
        (RunState.SUCCEEDED, 1, ahead.pid)] * 3


async def test_a_worker_whose_clock_runs_behind_takes_over_and_leases_by_the_store(
        app: rw.App, fleet: WorkerFleet) -> None:
    victim = fleet.start(lease_s=LEASE_S)
    await victim.wait_started()
    handle = await app.submit(apps.hold, tag="behind")
    await wait_until(lambda: all_in(app, [handle], {RunState.RUNNING}), "the victim runs it")
    # In its hold: the first start's mark is made just after its ledger line (apps.hold).
    await wait_until(lambda: (fleet.ledger / f"started-{handle.id}").exists(), "the run started and holds")
    # Its next start holds again (see apps.first_start): the run stays with the one that
    # takes it over, for the test to look at that owner's lease.
    (fleet.ledger / f"started-{handle.id}").unlink()
    behind = fleet.start(lease_s=LEASE_S, env=skewed(f"-{SKEW_S}s"))
    await behind.wait_started()

    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    taken = await wait_until(lambda: _held_by(app, handle.id, behind), "the skewed worker takes it over")
    assert taken.recoveries == 1
    # A worker with the right clock beside it judges that lease too, by the store's clock.
    judge = fleet.start(lease_s=LEASE_S)
    await judge.wait_started()
    await _heartbeats(app, judge, 4)
    (run,) = await runs_of(app, [handle])
    assert (run.state, run.fence, run.recoveries) == (RunState.RUNNING, taken.fence, 1), \
        "the skewed worker's lease is live by the store's clock: nobody took the run from it"

    fleet.release("behind")
    (done,) = await wait_until(lambda: all_done(app, [handle]), "the run ends")
    assert (done.state, done.recoveries, done.value()["pid"]) == (RunState.SUCCEEDED, 1, behind.pid)


async def _held_by(app: rw.App, run_id: int, worker: WorkerProcess) -> Run | None:
    (run,) = await app.store.run_get_many([run_id])
    if run.state is not RunState.RUNNING or run.owner is None:
        return None
    pids = {w.id: w.pid for w in await app.store.worker_list()}
    return run if pids.get(run.owner) == worker.pid else None


async def _heartbeats(app: rw.App, worker: WorkerProcess, count: int) -> None:
    """Until the store has recorded `count` distinct heartbeats of `worker`."""
    seen: set[float] = set()

    async def enough() -> bool:
        seen.update(w.heartbeat_at for w in await app.store.worker_list() if w.pid == worker.pid)
        return len(seen) >= count

    await wait_until(enough, f"worker {worker.name} heartbeats {count} times")


async def test_a_submitter_whose_clock_is_off_counts_a_delay_from_the_stores_clock(
        app: rw.App, tmp_path: Path) -> None:
    """A process's own times (a delay at submission here; a retry's backoff, a durable
    sleep) are computed by its clock corrected against the store's."""
    for offset, delay_s in ((f"+{SKEW_S}s", 0), (f"-{SKEW_S}s", 30)):
        env = {**os.environ, **skewed(offset), apps.LEDGER_ENV: str(tmp_path)}
        done = subprocess.run([sys.executable, "-m", "runwright", "submit", APP_SPEC, "record",
                               "--args", '{"n": 1}', "--key", offset, "--delay-s", str(delay_s),
                               "--url", app.url], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=DEADLINE_S)
        assert done.returncode == 0, done.stderr
        (run,) = [r for r in await app.list_runs() if r.key == offset]
        due_in_s = run.run_at - app.now()
        assert delay_s - SKEW_S / 4 < due_in_s <= delay_s, \
            f"submitted {offset} off with delay {delay_s} s: due in {due_in_s:.1f} s by the store's clock"
