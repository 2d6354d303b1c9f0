"""Retention against retries and against itself, with real processes, on every backend.

A retry that was answered "re-queued" is kept: retention never removes a run that became
live, whichever pass chose it and however close the retry came (thread caps and ages,
several passes at once). Several `runwright sweep`s at once each succeed, with disjoint
work. A worker whose sweep meets a store error logs it and goes on working."""

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
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
    WorkerRegisterParams,
)

from . import apps
from .harness import DEADLINE_S, ROOT, WorkerFleet, outputs, wait_until

pytestmark = pytest.mark.process
THREADS, TURNS = 30, 8  # the ended runs raced for: each thread's runs beyond its newest are capped
RETRIERS, CAP_SWEEPERS, AGE_SWEEPERS = 6, 2, 1
ROUNDS = 16  # at most, until one where both sides won some runs (a round: about a second)


async def _ended_threaded_runs(store, tag: str = "") -> list[int]:
    """THREADS x TURNS ended (failed, so retryable) runs of threads, by the store's clock.
    `tag` makes their keys, threads and queue new: a round after another leaves its
    re-queued runs live, for no later round to claim."""
    queue = f"{tag}q" if tag else "default"
    for n in range(THREADS):
        for turn in range(TURNS):
            await store.run_insert_threaded(RunInsertParams(key=f"{tag}th{n}-{turn}", task="t", args="{}",
                                                            thread=f"{tag}th{n}", on_busy="enqueue",
                                                            queue=queue))
    wid = await store.worker_register(WorkerRegisterParams("race", 1, [queue], ["t"]))
    ended: list[int] = []
    while runs := await store.run_claim(RunClaimParams(wid, (queue,), ("t",), 100, 60.0)):
        assert await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.FAILED)
                                            for r in runs]) == []
        ended += [r.id for r in runs]
    await store.worker_deregister(wid)
    assert len(ended) == THREADS * TURNS
    return ended


def _actor(role: str, url: str, go: Path, arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.race_actors", role, url, str(go),
                             str(go.with_suffix(".stop")), arg], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def _start_together(go: Path, actors: list[subprocess.Popen[bytes]]) -> None:
    await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == len(actors) or any(
        a.poll() is not None for a in actors), "every actor is ready", timeout_s=2 * DEADLINE_S)
    assert all(a.poll() is None for a in actors), "an actor died before the start"
    go.touch()


async def _race(app: rw.App, store_url: str, go: Path) -> tuple[list[int], list[dict], list[tuple[str, str]],
                                                                 list[subprocess.Popen[bytes]]]:
    """One race of retriers against sweepers over fresh ended runs: the runs, the retries'
    answers, and each sweeper's output beside the sweeper."""
    # Oldest first, as the passes choose: the retries meet the runs a pass is choosing.
    ended = sorted(await _ended_threaded_runs(app.store, tag=go.name))
    retriers = [_actor("retry", store_url, go, ",".join(map(str, ended[i::RETRIERS])))
                for i in range(RETRIERS)]
    sweepers = [_actor("sweep", store_url, go, mode)
                for mode in ["cap"] * CAP_SWEEPERS + ["age"] * AGE_SWEEPERS]
    try:
        await _start_together(go, retriers + sweepers)
        answers = []
        for retrier in retriers:
            out, err = outputs(retrier, 2 * DEADLINE_S)
            assert retrier.returncode == 0, err
            answers += [json.loads(line) for line in out.splitlines()]
    finally:
        go.with_suffix(".stop").touch()
    assert len(answers) == len(ended), "every retry was answered"
    return ended, answers, [outputs(sweeper, DEADLINE_S) for sweeper in sweepers], sweepers


async def test_a_run_whose_retry_was_answered_requeued_is_never_reclaimed(
        app: rw.App, store_url: str, tmp_path: Path) -> None:
    # On a busy machine one side may get the cores first: the sweepers remove every run
    # before a retry is sent (each retry refused), or the retriers re-queue every run before
    # a pass chooses (nothing to remove). Either is right but races nothing: such a round is
    # run again, on fresh runs, until one where both sides won some. Every round's answers
    # are held to the guarantee.
    requeued: list[int] = []
    for round_ in range(ROUNDS):
        ended, answers, swept, sweepers = await _race(app, store_url, tmp_path / f"go{round_}")
        for sweeper, (_, err) in zip(sweepers, swept):
            assert sweeper.returncode == 0, f"a retention pass failed: {err[-3000:]}"
        requeued = [a["id"] for a in answers if a["answer"] == "requeued"]
        found = {run.id: run for run in await app.store.run_get_many(requeued)}
        lost = [run_id for run_id in requeued if run_id not in found]
        assert not lost, f"{len(lost)} of {len(requeued)} re-queued runs were reclaimed: {lost[:10]}"
        assert {run.state for run in found.values()} <= {RunState.QUEUED}, "re-queued, and live since"
        removed = sum(json.loads(out)["removed"] for out, _ in swept)
        if requeued and removed:
            break
    else:
        raise AssertionError(f"the race was run: in none of {ROUNDS} rounds did both a retry "
                             f"and a pass come first for some runs")
    for run_id in requeued[:20]:  # and a reader is never told they expired
        assert (await app.get(run_id)).state is rw.RunState.QUEUED


def _cli_sweep(url: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "runwright", "sweep", *args, "--json", "--url", url],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def test_runwright_sweeps_at_once_each_exit_0_with_disjoint_work(app: rw.App, store_url: str) -> None:
    ended = set(await _ended_threaded_runs(app.store))
    bounds = ["--thread-max-runs", "1", "--max-age-s", "0.001"]
    sweeps = [_cli_sweep(store_url, *bounds, "--batch", "7") for _ in range(5)]
    reports = []
    for sweep in sweeps:
        out, err = outputs(sweep, 2 * DEADLINE_S)
        assert sweep.returncode == 0, f"runwright sweep failed beside the others: {err[-3000:]}"
        reports.append(json.loads(out))
    removed = [run_id for report in reports for run_id in report["run_ids"]]
    assert removed and len(removed) == len(set(removed)), "two sweeps removed the same run"
    last = _cli_sweep(store_url, *bounds)  # what the five left (a pass stops at a short batch)
    out, err = outputs(last, 2 * DEADLINE_S)
    assert last.returncode == 0, err
    rest = json.loads(out)["run_ids"]
    assert not set(rest) & set(removed) and set(rest) | set(removed) == ended
    for run_id in removed[:20]:
        with pytest.raises(rw.RunExpired):
            await app.get(run_id)


SWEEP = ["--retain-max-age-s", "0.001", "--sweep-interval-s", "0.1"]


async def _break_removal(app: rw.App, store_url: str, backend: str) -> None:
    """Make the store refuse retention's removals, as a database can (a trigger an operator
    added, a constraint, a key of the wrong type): no mock, the database says no."""
    if backend == "redis":  # the reclaimed ranges as a string: every reclaim script fails
        await app.store.redis.set(app.store.key("reclaimed"), "not a hash")
    elif backend == "postgres":
        schema = app.store.schema
        async with app.store._transaction() as conn:
            await conn.execute(f'CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS'
                               " $$ BEGIN RAISE EXCEPTION 'retention refused'; END $$")
            await conn.execute(f'CREATE TRIGGER refuse BEFORE DELETE ON "{schema}".runs'
                               f' FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse()')
    else:
        async with app.store._transaction() as conn:
            await conn.execute("CREATE TRIGGER refuse BEFORE DELETE ON runs"
                               " BEGIN SELECT RAISE(ABORT, 'retention refused'); END")


async def _mend_removal(app: rw.App, backend: str) -> None:
    if backend == "redis":
        await app.store.redis.delete(app.store.key("reclaimed"))
        return
    target = f'"{app.store.schema}".runs' if backend == "postgres" else "runs"
    async with app.store._transaction() as conn:
        await conn.execute("DROP TRIGGER refuse" + (f" ON {target}" if backend == "postgres" else ""))


async def test_a_worker_whose_sweep_meets_a_store_error_goes_on(
        app: rw.App, fleet: WorkerFleet, store_url: str, backend: str) -> None:
    await _break_removal(app, store_url, backend)
    worker = fleet.start(args=SWEEP)
    first = await app.submit(apps.record, n=1)
    assert (await first.result(timeout_s=DEADLINE_S)) == 1
    await wait_until(lambda: worker.log().count("operation=tick") >= 3 or worker.exited,
                     "the sweep meets the store's refusal three times")
    assert not worker.exited, f"the worker stopped: {worker.log()[-3000:]}"
    assert "side task" not in worker.log() or "died" not in worker.log()
    second = await app.submit(apps.record, n=2)
    assert (await second.result(timeout_s=DEADLINE_S)) == 2, "it still works"
    await _mend_removal(app, backend)
    await wait_until(lambda: _gone(app, first.id), "the next sweep reclaims, the store mended")
    assert not worker.exited


async def _gone(app: rw.App, run_id: int) -> bool:
    return await app.store.run_get(run_id) is None
