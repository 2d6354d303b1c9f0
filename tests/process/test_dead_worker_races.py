"""The store's decisions about workers against workers that change meanwhile, with real
processes racing, on every backend (actors in worker_race_actors.py):
- an unrunnable sweep never closes a run whose worker registered before the sweep
  committed: a registrar that still finds its run queued after registering claims it;
- a rescuer never deletes a worker that took its liveness mark again before the delete;
- a worker stopped (SIGSTOP) until it was declared dead claims nothing under its old
  registration when it wakes, and registers again to go on working."""

from __future__ import annotations

import glob
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest

import runwright as rw
from runwright.store._liveness import MISSING_GRACE_S
from runwright.store._params import RunInsertParams, RunRescueParams

from . import apps
from .harness import DEADLINE_S, ROOT, WorkerFleet, outputs, sigstop_outside_a_write, wait_until
from .worker_race_actors import QUEUE

pytestmark = pytest.mark.process

ROUNDS = 2
KINDS = 60  # one task each, nobody's until its registrar comes
SPACING_S = 0.02  # between the runs' due times: the sweeps close a few at a time
RACES_AT_MOST = 5  # until the race has run both ways (see the test)
REGISTRARS, SWEEPERS = 3, 2
RESCUERS, FLAPPERS, FLAPPING = 2, 2, 3  # FLAPPING workers in each flapper
FLAP_FOR_S = 8.0


def _actor(role: str, url: str, go: Path, arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.worker_race_actors", role, url, str(go),
                             str(go.with_suffix(".stop")), arg], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def _all_ready(go: Path, actors: list[subprocess.Popen[bytes]]) -> None:
    await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == len(actors) or any(
        a.poll() is not None for a in actors), "every actor is ready", timeout_s=2 * DEADLINE_S)
    assert all(a.poll() is None for a in actors), "an actor died before the start"


def _results(actors: list[subprocess.Popen[bytes]]) -> list[dict]:
    found = []
    for actor in actors:
        out, err = outputs(actor, 2 * DEADLINE_S)
        assert actor.returncode == 0, f"an actor failed: {err[-3000:]}"
        found.append(json.loads(out.splitlines()[-1]))
    return found


async def _unrunnable_race(app: rw.App, store_url: str, folder: Path, tag: str,
                           spacing_s: float) -> tuple[int, int]:
    """One race of registrars against unrunnable sweeps over KINDS runs of tasks of their
    own (named by `tag`), due `spacing_s` apart. Holds the guarantee; returns how many
    registrations came before a sweep closed their run, and how many after."""
    folder.mkdir()
    go = folder / "go"
    files = [folder / f"pairs{i}" for i in range(REGISTRARS)]
    registrars = [_actor("register", store_url, go, str(f)) for f in files]
    sweepers = [_actor("sweep", store_url, go, "-") for _ in range(SWEEPERS)]
    try:
        await _all_ready(go, registrars + sweepers)
        start = time.time() + 0.3
        params = [RunInsertParams(key=f"{tag}-{i}", task=f"{tag}-{i}", args="{}", queue=QUEUE,
                                  run_at=start + i * spacing_s) for i in range(KINDS)]
        runs = await app.store.run_insert_many(params)
        pairs = [f"{run.task}:{run.id}:{run.run_at + 0.001!r}" for run in runs]
        for i, path in enumerate(files):
            path.write_text(",".join(pairs[i::REGISTRARS]))
        go.touch()
        seen = [entry for result in _results(registrars) for entry in result["seen"]]
    finally:
        go.with_suffix(".stop").touch()
    swept = _results(sweepers)
    kept = [entry for entry in seen if entry["seen"] == "queued"]
    closed_first = [entry for entry in seen if entry["seen"] == "failed"]
    assert len(seen) == KINDS
    assert sum(s["closed"] for s in swept) >= len(closed_first), swept
    taken = [entry for entry in kept if entry["claimed"] != [entry["run"]]]
    states = {run.id: run.state.value for run in await app.store.run_get_many([e["run"] for e in taken])}
    assert not taken, (f"{len(taken)} of {len(kept)} runs found queued by a worker just registered for "
                       f"them were closed by a sweep that had not seen it: "
                       f"{[(e['run'], states.get(e['run'])) for e in taken][:10]}")
    return len(kept), len(closed_first)


@pytest.mark.parametrize("round_no", range(ROUNDS))
async def test_an_unrunnable_sweep_spares_the_runs_of_a_worker_registered_before_its_commit(
        app: rw.App, store_url: str, tmp_path: Path, round_no: int) -> None:
    # The race must be run both ways: some registrations before a sweep, some after. On a
    # loaded machine the registrars may fall behind the runs' due times and come after
    # every sweep: such a race is held to the guarantee all the same, and run again with
    # the runs further apart, until both ways were seen.
    spacing_s, before, after = SPACING_S, 0, 0
    for attempt in range(RACES_AT_MOST):
        kept, closed_first = await _unrunnable_race(app, store_url, tmp_path / f"race{attempt}",
                                                    f"u{round_no}-{attempt}", spacing_s)
        before, after = before + kept, after + closed_first
        if before and after:
            break
        spacing_s *= 2 if not kept else 1
    assert before and after, f"the race never ran both ways in {RACES_AT_MOST} races: {before=} {after=}"


async def test_a_rescuer_never_deletes_a_worker_that_took_its_mark_again(
        app: rw.App, store_url: str, tmp_path: Path, backend: str) -> None:
    # SQLite has no mark but the heartbeat: a short worker_stale_s stands for the grace.
    stale_s = str(MISSING_GRACE_S) if backend == "sqlite" else "10"
    go = tmp_path / "go"
    rescuers = [_actor("rescue", store_url, go, stale_s) for _ in range(RESCUERS)]
    flappers = [_actor("flap", store_url, go, str(FLAPPING)) for _ in range(FLAPPERS)]
    try:
        await _all_ready(go, rescuers + flappers)
        go.touch()
        ends = time.monotonic() + FLAP_FOR_S
        await wait_until(lambda: time.monotonic() > ends or any(
            a.poll() is not None for a in rescuers + flappers), "the flapping has gone on a while",
            timeout_s=2 * FLAP_FOR_S)
    finally:
        go.with_suffix(".stop").touch()
    flapped = _results(flappers)
    _results(rescuers)
    back = sum(f["back"] for f in flapped)
    dead = sum(f["declared_dead"] for f in flapped)
    lost = [wid for f in flapped for wid in f["lost_while_held"]]
    print(f"came back {back}, declared dead first {dead}, deleted after they came back {len(lost)}")
    assert back and dead, "the race was run both ways: some came back in time, some did not"
    assert not lost, f"workers deleted after they took their mark again: {lost}"


async def _declare_dead(app: rw.App, store_url: str, backend: str, worker_id: int) -> None:
    """Rescue passes (this test is the rescuer) until the stopped worker is declared dead:
    on PostgreSQL once its mark's session is cut (a stopped process cannot take it again),
    on Redis once its liveness key lapsed, on SQLite once its heartbeat is a second old."""
    if backend == "postgres":
        conn = await asyncpg.connect(store_url.split("?")[0])
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid = $1::oid AND objid = $2::oid AND objsubid = 2 AND granted",
                app.store.lock_namespace, worker_id)
        finally:
            await conn.close()

    async def deleted() -> bool:
        await app.store.run_rescue_many(RunRescueParams(worker_stale_s=1.0))
        return worker_id not in {w.id for w in await app.store.worker_list()}

    await wait_until(deleted, f"worker {worker_id} is declared dead")


async def test_a_worker_woken_after_it_was_declared_dead_claims_nothing_under_its_old_id(
        app: rw.App, fleet: WorkerFleet, store_url: str, backend: str) -> None:
    sleeper = fleet.start(concurrency=4)
    await sleeper.wait_started()
    (old,) = [w.id for w in await app.store.worker_list()]
    await sigstop_outside_a_write(sleeper, store_url)
    await _declare_dead(app, store_url, backend, old)
    handles = [await app.submit(apps.record, n=n) for n in range(20)]  # due when it wakes
    sleeper.signal(signal.SIGCONT)
    for handle in handles:
        await handle.result(timeout_s=DEADLINE_S)
    started = [e for h in handles for e in await app.events_page(h.id) if e.kind == "started"]
    by_old = [e.data for e in started if e.data["worker"] == old]
    assert not by_old, f"the worker declared dead claimed under its old id: {by_old}"
    (again,) = await app.store.worker_list()
    assert again.pid == sleeper.pid and again.id != old, "it registered again"
    assert {e.data["worker"] for e in started} == {again.id}
    assert await sleeper.stop() == 0
