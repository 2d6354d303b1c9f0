"""Keyed submissions inside application transactions, raced: SUBMITTERS processes submit
the same KEYS keys, each key in a transaction of its own that commits or rolls back at
random, while one worker drains and another is stopped (SIGSTOP) across the whole race and
woken after it. A key's insert reads whether the key names a run, then writes one: two open
transactions with one key must make one run, and a rolled-back one none.

Asserted: a key that some submitter committed names exactly one run, and every committed
answer for it is that run; a key that nobody committed names none; every run executes
exactly once (the ledger), the stopped worker's share included."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import runwright as rw

from .harness import ROOT, WorkerFleet, sigstop_outside_a_write, wait_until

pytestmark = [pytest.mark.process, pytest.mark.parametrize("backend", ["sqlite", "postgres"])]

SUBMITTERS, KEYS = 4, 500


def _submitter(store_url: str, seed: int, out: Path, go: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.txn_submitter", store_url, str(seed),
                             str(KEYS), str(out), str(go)], cwd=ROOT, stderr=subprocess.PIPE)


# The client, two workers' pools and four submitters' (each an App and a connection).
@pytest.mark.pg_connections(40)
async def test_racing_submitters_make_one_run_per_committed_key_and_each_runs_once(
        app: rw.App, fleet: WorkerFleet, store_url: str, tmp_path: Path) -> None:
    draining, stopped = fleet.start(concurrency=8), fleet.start(concurrency=8)
    for worker in (draining, stopped):
        await worker.wait_started()
    await sigstop_outside_a_write(stopped, store_url)
    outs, go = [tmp_path / f"submitter-{i}.jsonl" for i in range(SUBMITTERS)], tmp_path / "go"
    submitters = [_submitter(store_url, seed, out, go) for seed, out in enumerate(outs)]
    try:
        await wait_until(lambda: all(Path(f"{out}.ready").exists() for out in outs),
                         "every submitter is ready")
        go.touch()
        for proc in submitters:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err.decode()[-3000:]
    finally:
        stopped.signal(signal.SIGCONT)
    answers: dict[str, list[dict]] = defaultdict(list)
    for out in outs:
        for line in out.read_text().splitlines():
            answer = json.loads(line)
            answers[answer["key"]].append(answer)
    assert len(answers) == KEYS and all(len(given) == SUBMITTERS for given in answers.values())
    # The race was met: submits that found their key's run made by another's commit.
    assert any(answer["existed"] for given in answers.values() for answer in given)

    runs = await app.list_runs(task="record", limit=KEYS * SUBMITTERS)
    by_key = {run.key: run for run in runs}
    assert len(by_key) == len(runs), "a key named two runs"
    for key, given in answers.items():
        committed = [answer["id"] for answer in given if answer["committed"]]
        if committed:
            assert key in by_key and set(committed) == {by_key[key].id}, (key, given)
        else:
            assert key not in by_key, (key, given)

    await wait_until(lambda: _all_succeeded(app, len(runs)), f"all {len(runs)} runs end")
    ran = fleet.events_by_run("ran")
    assert {run.id: len(ran[run.id]) for run in runs} == {run.id: 1 for run in runs}
    for worker in (draining, stopped):
        assert await worker.stop() == 0


async def _all_succeeded(app: rw.App, total: int) -> bool:
    done = await app.list_runs(task="record", states=[rw.RunState.SUCCEEDED], limit=total)
    return len(done) == total
