"""Cancels racing the children their runs submit, on every backend: real worker
processes run parents that submit children in a loop while other processes cancel the
parents. A child submitted at the moment of a cancel is in the family the cancel reads,
or finds its parent cancelled and is born cancelled (rules.born_cancelled): none of them
ever runs, and every run ends."""

from __future__ import annotations

import glob
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import runwright as rw
from runwright.runs import Run, RunState
from runwright.store._params import RunListParams

from . import apps
from .harness import DEADLINE_S, ROOT, WorkerFleet, outputs, wait_until

pytestmark = pytest.mark.process
ROUNDS, PARENTS, CANCELLERS = 3, 4, 2


def _canceller(url: str, go: Path, ids: list[int]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.race_actors", "cancel", url, str(go),
                             str(go.with_suffix(".stop")), ",".join(map(str, ids))], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def _children(app: rw.App) -> list[Run]:
    """Every `spawned` run, paged newest first."""
    found: list[Run] = []
    before = None
    while page := await app.store.run_list(RunListParams(task="spawned", limit=500, before_id=before)):
        found += page
        before = page[-1].id
    return found


async def _round(app: rw.App, fleet: WorkerFleet, store_url: str, go: Path) -> list[int]:
    """PARENTS spawners, cancelled (each by every canceller, in orders of their own) while
    they submit children; returns the parents once they ended."""
    parents = [(await app.submit(apps.spawner)).id for _ in range(PARENTS)]
    # The cancellers start first and wait at `go`: the cancels come within milliseconds
    # of the spawners' first children, not after a process start.
    cancellers = [_canceller(store_url, go, random.sample(parents, len(parents))) for _ in range(CANCELLERS)]
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == CANCELLERS or any(
            c.poll() is not None for c in cancellers), "every canceller is ready", timeout_s=2 * DEADLINE_S)
        assert all(c.poll() is None for c in cancellers), "a canceller died before the start"
        await wait_until(lambda: set(parents) <= set(fleet.events_by_run("spawning")),
                         "every parent is submitting children")
        go.touch()
        for canceller in cancellers:
            out, err = outputs(canceller, 2 * DEADLINE_S)
            assert canceller.returncode == 0, f"a cancel failed: {err[-3000:]}"
            answers = [json.loads(line) for line in out.splitlines()]
            assert sorted(a["id"] for a in answers) == sorted(parents), out
    finally:
        for canceller in cancellers:
            if canceller.poll() is None:
                canceller.kill()
                canceller.wait()

    async def parents_ended() -> bool:
        return all(run.done for run in await app.store.run_get_many(parents))

    await wait_until(parents_ended, "every cancelled parent ended")
    return parents


async def test_no_child_of_a_cancelled_parent_runs(app: rw.App, fleet: WorkerFleet, store_url: str,
                                                    tmp_path: Path) -> None:
    worker = fleet.start(concurrency=PARENTS)  # the parents' queue only: "default"
    await worker.wait_started()
    parents: list[int] = []
    for n in range(ROUNDS):
        parents += await _round(app, fleet, store_url, tmp_path / f"go{n}")
    # Only now are the children's queue served: a child that escaped its parent's cancel
    # is queued, and runs.
    kids = fleet.start(concurrency=8, args=["-q", "kids"])
    await kids.wait_started()

    async def children_ended() -> list[Run] | None:
        children = await _children(app)
        return children if all(child.done for child in children) else None

    children = await wait_until(children_ended, "every child ended")
    for run in await app.store.run_get_many(parents):
        assert run.state is RunState.CANCELLED, f"a parent was not stopped by its cancel: {run}"
    assert len(children) >= len(parents), "the race was run: every parent submitted children"
    ran = sorted(run_id for run_id in fleet.events_by_run("spawned-ran"))
    escaped = sorted(child.id for child in children if child.state is not RunState.CANCELLED)
    assert not ran and not escaped, (
        f"{len(children)} children of cancelled parents; ran: {ran[:20]}; not cancelled: {escaped[:20]}")
    born = sum(1 for child in children if json.loads(child.error or "{}").get("message")
               == "its parent was cancelled")
    print(f"{len(children)} children, {born} born cancelled")
    assert await kids.stop() == 0
    assert await worker.stop() == 0
