"""Forks with one key racing in processes of their own, on every backend: each key makes one
run, whose journal holds the copy once (never two copies, never a fork without its copy),
and every process is answered that run; exactly one of them made it."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

import runwright as rw
from runwright.runs import RunState
from runwright.store._params import (
    EventListParams,
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
    RunListParams,
    StepRecordParams,
    WorkerRegisterParams,
)

from .harness import DEADLINE_S, ROOT, outputs, wait_until

pytestmark = pytest.mark.process
FORKERS, KEYS, STEPS, FROM_STEP = 6, 40, 8, 5


async def _failed_run(app: rw.App) -> int:
    """A run that journaled STEPS steps and then ended failed."""
    store = app.store
    (run,) = await store.run_insert_many([RunInsertParams(key="original", task="t", args="{}")])
    wid = await store.worker_register(WorkerRegisterParams("race", 1, ["default"], ["t"]))
    (run,) = await store.run_claim(RunClaimParams(wid, ("default",), ("t",), 1, 60.0))
    assert await store.step_record_many([StepRecordParams(run.id, run.fence, 0, "s0", "done", "0")]) == [True]
    for i in range(1, STEPS):
        assert await store.step_record_many([StepRecordParams(run.id, run.fence, i, f"s{i}", "done", str(i))])
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.FAILED)]) == []
    await store.worker_deregister(wid)
    return run.id


def _forker(url: str, go: Path, spec: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.race_actors", "fork", url, str(go),
                             str(go.with_suffix(".stop")), spec], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def test_forks_with_one_key_in_many_processes_make_one_run(app: rw.App, store_url: str,
                                                                 tmp_path: Path) -> None:
    original = await _failed_run(app)
    keys = [f"fork-{n}" for n in range(KEYS)]
    go = tmp_path / "go"
    forkers = [_forker(store_url, go, f"{original}:{FROM_STEP}:{','.join(keys)}") for _ in range(FORKERS)]
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == FORKERS or any(
            f.poll() is not None for f in forkers), "every forker is ready", timeout_s=2 * DEADLINE_S)
        assert all(f.poll() is None for f in forkers), "a forker died before the start"
        go.touch()
        answers = []
        for forker in forkers:
            out, err = outputs(forker, 2 * DEADLINE_S)
            assert forker.returncode == 0, f"a fork failed: {err[-3000:]}"
            answers += [json.loads(line) for line in out.splitlines()]
    finally:
        for forker in forkers:
            if forker.poll() is None:
                forker.kill()
                forker.wait()
    assert len(answers) == FORKERS * KEYS
    by_key: dict[str, set[int]] = {}
    made: dict[str, int] = {}
    for answer in answers:
        by_key.setdefault(answer["key"], set()).add(answer["id"])
        made[answer["key"]] = made.get(answer["key"], 0) + (not answer["existed"])
    assert all(len(ids) == 1 for ids in by_key.values()), by_key
    assert made == {key: 1 for key in keys}, made
    forks = await app.store.run_list(RunListParams(forked_from=original, limit=1000))
    assert sorted(run.id for run in forks) == sorted(ids.pop() for ids in by_key.values())
    journal = [(s.position, s.name, s.result) for s in await app.store.step_list(original)]
    for fork in forks:
        copy = [(s.position, s.name, s.result) for s in await app.store.step_list(fork.id)]
        assert copy == journal[:FROM_STEP]
        events = await app.store.event_list(EventListParams(fork.id, 0, 10))
        assert [e.kind for e in events] == ["submitted", "forked"]
