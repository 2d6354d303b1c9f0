"""A deploy under runs in flight, with real worker processes (issue 41): 200 runs of
version N wait (in durable sleeps, on questions, in long steps), some before the point the
next version changes and some after it. Before the switch, `runwright replay` on the new
code, changed without a patch, names exactly the runs whose journals went past that point,
and on the same change behind `ctx.patched` names none. Then version N's workers are
stopped (SIGTERM, the long steps given back), N+1's started, and every wait ended: every
run succeeds, none with NonDeterminismError, the runs that went past the change on N take
the old path and every other run (those that reach the change on N+1, old or new) the new
one, each journaled step executed once, by a worker of the version that journaled it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

import runwright as rw
from runwright.runs import Run, RunState
from runwright.testing import replay

from . import patch_upgrade_apps as versions
from .harness import ROOT, WorkerFleet, wait_until
from .patch_upgrade_apps import NEW_VERSION, OLD_VERSION, PATCH

pytestmark = pytest.mark.process

MODULE = "tests.process.patch_upgrade_apps"
IN_FLIGHT, NEW_RUNS = 200, 30
WORKERS, CONCURRENCY = 2, 40  # slots for every long step at once (40 of the 200), and room
MARKER = f"patch:{PATCH}"


def errands(first: int, count: int) -> list[dict[str, Any]]:
    """Two in five sleep, two ask, one runs a long step; one in four waits before the change."""
    return [{"n": n, "wait": ("sleep", "sleep", "ask", "ask", "long")[n % 5],
             "stage": "early" if (n // 5) % 4 == 0 else "late"} for n in range(first, first + count)]


def submitter(url: str, version: str) -> rw.App:
    app = rw.App(url, version=version)
    app.tasks.update((versions.new if version == NEW_VERSION else versions.old).tasks)
    return app


async def journals(app: rw.App, run_ids: list[int]) -> dict[int, list[str]]:
    return {run_id: [r.name for r in await app.store.step_list(run_id)] for run_id in run_ids}


async def answer_all(app: rw.App) -> int:
    """Answer every question still open; how many were."""
    questions = await app.questions(limit=1000)
    for question in questions:
        await app.answer(question.run_id, question.id, True, by="reviewer")
    return len(questions)


def replay_cli(url: str, version: str) -> tuple[int, list[dict[str, Any]], str]:
    """`runwright replay MODULE:version --json` in a process of its own: exit code, its
    outcomes (one JSON object a run) and its stderr."""
    shown = subprocess.run([sys.executable, "-m", "runwright", "replay", f"{MODULE}:{version}", "--task",
                            "errand", "--json", "--url", url], cwd=ROOT, capture_output=True, text=True,
                           timeout=180, env={**os.environ, "RUNWRIGHT_LOG_LEVEL": "WARNING"})
    return shown.returncode, [json.loads(line) for line in shown.stdout.splitlines()], shown.stderr


# Two workers of one version at a time (each its pool and notification pool), this process's
# client and submitters, and a replay process: measured 34 at most at once.
@pytest.mark.pg_connections(44)
async def test_a_patched_deploy_under_200_runs_in_flight_breaks_none_and_replay_named_the_unpatched_risk(
        app: rw.App, fleet: WorkerFleet) -> None:
    old_spec, new_spec = f"{MODULE}:old", f"{MODULE}:new"
    wake = fleet.ledger / "wake"
    old_workers = [fleet.start(CONCURRENCY, app_spec=old_spec, drain_grace_s=0.5) for _ in range(WORKERS)]
    for worker in old_workers:
        await worker.wait_started()
    plan = errands(0, IN_FLIGHT)
    async with submitter(fleet.url, OLD_VERSION) as old_app:
        old_runs = [h.id for h in await old_app.submit_many("errand", plan)]
    args = dict(zip(old_runs, plan))
    by_wait = {wait: {r for r in old_runs if args[r]["wait"] == wait} for wait in versions.WAITS}
    late = {r for r in old_runs if args[r]["stage"] == "late"}

    # Every run reaches its wait on N: a long step in flight (its run holds a slot), a
    # question asked (its run parked: no slot held), a durable sleep journaled (a sleeper
    # is parked but for the moments it looks at the wake file, so it is not asked to be still).
    async def all_waiting() -> bool:
        now = {run.id: run for run in await runs_of_ids(app, old_runs)}
        working = set(fleet.events_by_run("work"))
        asked = {q.run_id for q in await app.questions(limit=1000)}
        sleepers = await journals(app, sorted(by_wait["sleep"]))
        return (working == by_wait["long"] and all(now[r].state is RunState.RUNNING for r in working)
                and asked == by_wait["ask"]
                and all((now[r].state, now[r].waiting) == (RunState.QUEUED, rw.WaitReason.ANSWER)
                        for r in asked)
                and all("sleep" in names for names in sleepers.values()))

    await wait_until(all_waiting, f"all {IN_FLIGHT} runs wait on version N", timeout_s=120, interval_s=0.25)
    assert not wake.exists()
    # Which runs went past the change, read from their journals (not from the plan): those
    # that journaled the old lookup. Nothing moves a run past it while every wait holds.
    before = await journals(app, old_runs)
    past = {r for r, names in before.items() if "lookup_v1" in names}
    assert past == late, "the late runs, and only they, went past the change on N"
    assert all(names[0] == "fetch" and MARKER not in names for names in before.values())

    # Replay before the switch, on the code about to be deployed: unpatched, it names
    # exactly the runs that went past the change; patched, none.
    code, outcomes, err = await asyncio.to_thread(replay_cli, fleet.url, "unpatched")
    assert code == 1, err
    assert sorted(o["run_id"] for o in outcomes) == sorted(old_runs)
    diverged = {o["run_id"] for o in outcomes if o["status"] == "diverged"}
    assert diverged == past, (sorted(diverged - past), sorted(past - diverged))
    assert all(o["status"] == "clean" for o in outcomes if o["run_id"] not in past), outcomes
    for outcome in outcomes:
        if outcome["status"] == "diverged":
            assert outcome["position"] == 1, outcome
            assert "'lookup_v2'" in outcome["detail"] and "'lookup_v1'" in outcome["detail"], outcome
    code, outcomes, err = await asyncio.to_thread(replay_cli, fleet.url, "new")
    assert code == 0, err
    assert sorted(o["run_id"] for o in outcomes) == sorted(old_runs)
    assert all(o["status"] == "clean" for o in outcomes), [o for o in outcomes if o["status"] != "clean"]

    # The switch: N's workers stop (their long steps given back, not failed), N+1's start.
    for worker in old_workers:
        worker.signal(signal.SIGTERM)
    for worker in old_workers:
        assert await worker.wait_exit() == 0
    given_back = await runs_of_ids(app, sorted(by_wait["long"]))
    assert all((run.state, run.owner) == (RunState.QUEUED, None) for run in given_back), given_back
    new_workers = [fleet.start(CONCURRENCY, app_spec=new_spec) for _ in range(WORKERS)]
    for worker in new_workers:
        await worker.wait_started()
    async with submitter(fleet.url, NEW_VERSION) as new_app:
        new_runs = [h.id for h in await new_app.submit_many("errand", errands(IN_FLIGHT, NEW_RUNS))]
        everything = old_runs + new_runs

        # Every wait ends: the wake file (sleeps, long steps), and each question answered.
        wake.touch()

        async def all_done() -> bool:
            await answer_all(app)
            return all(run.done for run in await runs_of_ids(app, everything))

        await wait_until(all_done, "every run ends on version N+1", timeout_s=120, interval_s=0.25)
        ended = {run.id: run for run in await runs_of_ids(app, everything)}
        old_pids, new_pids = {w.pid for w in old_workers}, {w.pid for w in new_workers}
        check_paths(ended, old_runs, new_runs, past)
        after = await journals(app, everything)
        check_journals(after, before, past)
        check_executions(fleet, everything, past, old_pids, new_pids)
        for worker in [*old_workers, *new_workers]:
            assert "NonDeterminism" not in worker.log(), worker.name
        # The ended runs replay on the new code too, the patch markers with them.
        outcomes_after = await replay(new_app, task="errand", limit=1000)
        assert sorted(o.run_id for o in outcomes_after) == sorted(everything)
        assert all(o.ok for o in outcomes_after), [o for o in outcomes_after if not o.ok]
        for worker in new_workers:
            assert await worker.stop() == 0


def check_paths(ended: dict[int, Run], old_runs: list[int], new_runs: list[int], past: set[int]) -> None:
    """Each run succeeded; the old path exactly for the runs that went past the change on N."""
    for run_id, run in ended.items():
        assert run.state is RunState.SUCCEEDED, (run_id, run.state, run.error)
        result = run.value()
        assert result["path"] == ("old" if run_id in past else "new"), (run_id, result)
        assert result["version"] == NEW_VERSION, "every run finished on N+1's workers"
    assert {ended[r].version for r in old_runs} == {OLD_VERSION}
    assert {ended[r].version for r in new_runs} == {NEW_VERSION}


def check_journals(after: dict[int, list[str]], before: dict[int, list[str]], past: set[int]) -> None:
    for run_id, names in after.items():
        if run_id in past:
            assert names[:len(before[run_id])] == before[run_id], "the journal only grew"
            assert {"lookup_v2", "audit", MARKER}.isdisjoint(names), (run_id, names)
        else:
            assert "lookup_v1" not in names, (run_id, names)
            at = names.index(MARKER)
            assert names[at + 1:at + 3] == ["lookup_v2", "audit"], (run_id, names)
        assert names[-1] == "finish", (run_id, names)


def check_executions(fleet: WorkerFleet, everything: list[int], past: set[int], old_pids: set[int],
                     new_pids: set[int]) -> None:
    """Each journaled step ran once, on the version that journaled it: fetch and the old
    lookup on N (before the switch), the new lookup, the audit and finish on N+1."""
    runs = set(everything)
    expected = {"lookup_v1": (past, old_pids), "lookup_v2": (runs - past, new_pids),
                "audit": (runs - past, new_pids), "finish": (runs, new_pids)}
    for step, (chosen, pids) in expected.items():
        executions = fleet.events_by_run(step)
        assert set(executions) == chosen, (step, sorted(set(executions) ^ chosen))
        for run_id, done in executions.items():
            assert len(done) == 1 and done[0][1] in pids, (step, run_id, done)
    fetched = fleet.events_by_run("fetch")
    assert set(fetched) == runs and all(len(done) == 1 for done in fetched.values())


async def runs_of_ids(app: rw.App, run_ids: list[int]) -> list[Run]:
    return await app.store.run_get_many(run_ids)

