"""Pauses racing claims, finishes and cancels, in real processes on every backend: a
worker claims and runs short runs while pausers (each pausing every run, in an order of its
own) and a canceller act on them at once. Each run is changed once and consistently: held
at most once, never both paused and ended, a run held before its claim never runs until
resumed; then racing resumers resume each paused run once, and every run not cancelled
succeeds with each of its steps executed exactly once."""

from __future__ import annotations

import glob
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import runwright as rw
from runwright.runs import RunState

from . import apps
from .harness import DEADLINE_S, ROOT, outputs, wait_until

pytestmark = pytest.mark.process
RUNS, STEPS, PAUSERS, RESUMERS = 16, 3, 2, 2


def _actor(role: str, url: str, go: Path, ids: list[int]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.race_actors", role, url, str(go),
                             str(go.with_suffix(".stop")), ",".join(map(str, ids))], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def _race(actors: list[subprocess.Popen[bytes]], go: Path) -> list[dict[int, str]]:
    """Start `actors` together (each waits at `go`); each actor's answers, by run id. On a
    failure every actor is killed and reaped (a live Popen left to the collector is an
    unraisable warning that fails whichever test of this worker comes next)."""
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == len(actors) or any(
            a.poll() is not None for a in actors), "every actor is ready", timeout_s=2 * DEADLINE_S)
        dead = [a for a in actors if a.poll() is not None]
        assert not dead, f"an actor died before the start: {outputs(dead[0], DEADLINE_S)[1]}"
        go.touch()
        answers: list[dict[int, str]] = []
        for actor in actors:
            out, err = outputs(actor, 2 * DEADLINE_S)
            assert actor.returncode == 0, err
            answers.append({item["id"]: item["answer"] for item in map(json.loads, out.splitlines())})
        return answers
    except BaseException:
        for actor in actors:
            if actor.poll() is None:
                actor.kill()
            with actor:  # closes its pipes (again, if `outputs` did) and reaps it
                pass
        raise


def _by_run(answers: list[dict[int, str]]) -> dict[int, list[str]]:
    return {run_id: [each[run_id] for each in answers if run_id in each] for run_id in answers[0]}


async def test_pauses_racing_claims_finishes_and_cancels_change_each_run_once(
        app: rw.App, fleet, store_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    # Submitted first, the actors ready, then the worker: at the go, it claims its first
    # runs while the pauses come, some runs still queued, others at a step or finishing.
    runs = [(await app.submit(apps.steps_with_ledger, steps=STEPS, min_s=0.005, max_s=0.03)).id
            for _ in range(RUNS)]
    doomed = runs[::3]
    actors = [_actor("pause", store_url, go, random.sample(runs, len(runs))) for _ in range(PAUSERS)]
    actors.append(_actor("cancel", store_url, go, random.sample(doomed, len(doomed))))
    worker = fleet.start(concurrency=4)
    await worker.wait_started()
    pauses = _by_run((await _race(actors, go))[:PAUSERS])

    async def settled() -> bool:  # ended, or paused: nothing left running or due
        return all(run.done or run.paused for run in await app.store.run_get_many(runs))

    await wait_until(settled, "every run ended or was paused")
    by_id = {run.id: run for run in await app.store.run_get_many(runs)}
    held_before_claim = 0
    for run_id in runs:
        run = by_id[run_id]
        kinds = [e.kind for e in await app.events_page(run_id, limit=1000)]
        answers = pauses[run_id]
        assert set(answers) <= {"held", "requested", "RunEnded"}, (run_id, answers)
        assert kinds.count("paused") <= 1 and kinds.count("pause_requested") <= 1, (run_id, kinds)
        # Two pausers: the second to come changes nothing, whatever the first did.
        assert answers.count("held") + answers.count("requested") <= 2, (run_id, answers)
        ended = [k for k in kinds if k in ("succeeded", "failed", "dead", "cancelled")]
        assert len(ended) <= 1, (run_id, kinds)
        if run.paused:
            assert kinds.count("paused") == 1 and not ended, (run_id, kinds)
            assert kinds[-1] == "paused", (run_id, kinds)
        else:
            assert run.done and kinds[-1] in ("succeeded", "cancelled"), (run_id, kinds)
        if "held" in answers:  # paused at once: it runs no more until resumed
            assert run.paused or run.state is RunState.CANCELLED, (run_id, kinds)
        if "paused" in kinds and "started" not in kinds[:kinds.index("paused")]:
            held_before_claim += 1  # held while queued: it never ran, nor was claimed
            assert "started" not in kinds, (run_id, kinds)
        if "paused" in kinds and run.state is not RunState.CANCELLED:
            assert run.paused, (run_id, kinds)  # paused, nothing but a resume moves it on
        if pauses[run_id].count("RunEnded") == PAUSERS:
            assert run.done, (run_id, kinds)

    paused = sorted(run_id for run_id, run in by_id.items() if run.paused)
    go2 = tmp_path / "go2"
    resumes = _by_run(await _race([_actor("resume", store_url, go2, random.sample(paused, len(paused)))
                                   for _ in range(RESUMERS)], go2)) if paused else {}
    for run_id in paused:  # each resumed once: the other resumer is refused (it is running
        # or has ended by then, or not yet claimed)
        answers = resumes[run_id]
        assert answers.count("queued") == 1 and len(answers) == RESUMERS, (run_id, answers)
        assert set(answers) - {"queued"} <= {"RunNotPaused", "RunEnded"}, (run_id, answers)

    cancelled = {run.id for run in await app.store.run_get_many(runs) if run.state is RunState.CANCELLED}
    for run_id in sorted(set(runs) - cancelled):
        assert await (await app.get(run_id)).result(timeout_s=60) == sum(range(STEPS))
    ledger = Counter((event, run_id) for event, run_id, _, _ in fleet.ledger_lines())  # every run ended
    for run_id in runs:
        counts = [ledger[(f"step-{i}", run_id)] for i in range(STEPS)]
        assert counts == [1] * STEPS if run_id not in cancelled else max(counts) <= 1, (run_id, counts)
    print(f"paused {len(paused)} of {RUNS}, {held_before_claim} before their claim; "
          f"answers {Counter(a for answers in pauses.values() for a in answers)}")
