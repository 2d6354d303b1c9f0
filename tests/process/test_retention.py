"""Retention with real processes, on every backend: the sweeping worker removes ended
runs past their age, a reader is told they expired (the library, the CLI and HTTP: 410),
and when the sweeping worker dies another takes the sweep over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

import runwright as rw

from . import apps
from .harness import ROOT, WorkerFleet, wait_until

pytestmark = pytest.mark.process
SWEEP = ["--retain-max-age-s", "0.5", "--sweep-interval-s", "0.2"]


async def _gone(app: rw.App, run_id: int) -> bool:
    return await app.store.run_get(run_id) is None


async def test_a_sweeping_worker_removes_old_runs_and_another_takes_over_when_it_dies(
        app: rw.App, fleet: WorkerFleet) -> None:
    first = fleet.start(args=SWEEP)
    kept = fleet.start()  # no retention setting: it never sweeps
    handle = await app.submit(apps.record, n=1)
    assert (await handle.result(timeout_s=60)) == 1
    await wait_until(lambda: _gone(app, handle.id), "the ended run is reclaimed")
    with pytest.raises(rw.RunExpired, match="expired"):
        await app.get(handle.id)
    with pytest.raises(rw.RunNotFound):  # an id that never was a run is not "expired"
        await app.get(handle.id + 10**9)
    # the pass logs once it has ended, which can be after the run is gone
    await wait_until(lambda: "retention pass" in first.log(), "the sweeper logs its pass")

    first.signal(signal.SIGKILL)
    await first.wait_exit()
    second = fleet.start(args=SWEEP)
    later = await app.submit(apps.record, n=2)
    assert (await later.result(timeout_s=60)) == 2
    await second.wait_started()  # a start can outlast the wait below on a loaded machine
    await wait_until(lambda: _gone(app, later.id), "the next sweeper reclaims it once the lease lapsed")
    await wait_until(lambda: "retention pass" in second.log(), "the next sweeper logs its pass")
    assert "retention pass" not in kept.log()
    open_run = await app.submit(apps.record, n=3, delay_s=3600)
    assert (await app.get(open_run.id)).state is rw.RunState.QUEUED, "an open run is never reclaimed"


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwright", *args, "--url", url], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


async def test_runwright_sweep_says_what_it_removes(app: rw.App, fleet: WorkerFleet, store_url: str) -> None:
    fleet.start()
    handles = [await app.submit(apps.record, n=i) for i in range(3)]
    for handle in handles:
        await handle.result(timeout_s=60)
    dry = cli("sweep", "--max-age-s", "0.001", "--dry-run", "--json", url=store_url)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["runs"], report["run_ids"], report["dry_run"]) == (3, [h.id for h in handles], True)
    assert report["events"] == 9  # submitted, started, succeeded: each
    assert all([await app.store.run_get(h.id) for h in handles]), "a dry run removes nothing"
    done = cli("sweep", "--max-age-s", "0.001", url=store_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("removed 3 runs (0 journaled steps, 9 events)")
    shown = cli("show", str(handles[0].id), url=store_url)
    assert shown.returncode != 0 and "RunExpired" in shown.stderr
    bad = cli("sweep", "--max-age-s", "0", url=store_url)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


async def _log(app: rw.App, run_id: int) -> list[rw.Event]:
    return [item async for item in app.events(run_id, after=0, follow=False)]


async def test_a_sweeping_worker_trims_long_logs_behind_a_marker(app: rw.App, fleet: WorkerFleet) -> None:
    fleet.start(args=["--retain-max-events", "4", "--sweep-interval-s", "0.2"])
    handle = await app.submit(apps.narrated_steps, steps=8, gates=[])
    await handle.result(timeout_s=60)

    async def trimmed() -> bool:
        return len(await _log(app, handle.id)) == 5
    await wait_until(trimmed, "the ended run's log is trimmed to its last 4 events")
    log = await _log(app, handle.id)
    assert log[0].kind == "trimmed" and log[0].data["first_seq"] == log[1].seq == log[0].seq + 1
    assert [e.seq for e in log] == list(range(log[0].seq, log[0].seq + 5))
    assert log[-1].kind == "succeeded"
    assert await app.get(handle.id), "a trimmed run is still there"


async def test_runwright_sweep_trims_logs_on_request(app: rw.App, fleet: WorkerFleet, store_url: str) -> None:
    fleet.start()
    handle = await app.submit(apps.narrated_steps, steps=5, gates=[])
    await handle.result(timeout_s=60)
    length = len(await _log(app, handle.id))
    dry = cli("sweep", "--max-events", "2", "--dry-run", "--json", url=store_url)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["trimmed_runs"], report["trimmed_events"], report["runs"]) == (1, length - 2, 0)
    assert len(await _log(app, handle.id)) == length, "a dry run removes nothing"
    done = cli("sweep", "--max-events", "2", url=store_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"removed {length - 2} events from the logs of 1 runs")
    assert [e.kind for e in await _log(app, handle.id)][0] == "trimmed"
    neither = cli("sweep", url=store_url)
    assert neither.returncode == 2 and len(neither.stderr.strip().splitlines()) == 1


async def test_runwright_sweep_keeps_a_threads_newest_runs(app: rw.App, fleet: WorkerFleet,
                                                          store_url: str) -> None:
    fleet.start()
    handles = [await app.submit(apps.record, n=i, thread="chat", on_busy="enqueue") for i in range(3)]
    for handle in handles:
        await handle.result(timeout_s=60)
    done = cli("sweep", "--thread-max-runs", "1", "--json", url=store_url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["capped_runs"], report["run_ids"]) == (2, [h.id for h in handles[:2]])
    with pytest.raises(rw.RunExpired):
        await app.get(handles[0].id)
    assert (await app.get(handles[2].id)).state is rw.RunState.SUCCEEDED, "the newest stays"


async def test_runwright_sweep_trims_histories_and_reclaims_tombstones(app: rw.App, store_url: str) -> None:
    import os
    import time

    from runwright.store._params import (
        RunClaimParams,
        RunFinishParams,
        RunInsertParams,
        ThreadAppendParams,
        ThreadGetParams,
        WorkerRegisterParams,
    )

    store = app.store
    wid = await store.worker_register(WorkerRegisterParams("test-host", os.getpid(), ["default"], ["t"]))
    for thread, messages in (("chat", ["a", "b", "c"]), ("bye", ["x"])):  # one ended run each
        await store.run_insert_threaded(RunInsertParams(key=thread, task="t", args="{}", thread=thread))
        (run,) = await store.run_claim(RunClaimParams(wid, ("default",), ("t",), 1, 30.0))
        for idx, text in enumerate(messages):
            appended = ThreadAppendParams(run.id, run.fence, thread, idx, json.dumps(text))
            assert await store.thread_append(appended)
        await store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.SUCCEEDED, result="1")])
    await app.delete_thread("bye")
    deleted_at = (await store.thread_get(ThreadGetParams("bye"))).deleted_at
    # the stamp is the store's clock (PostgreSQL's, Redis's), which may run a few ms ahead of ours
    assert deleted_at is not None and abs(deleted_at - time.time()) < 5
    bounds = ["--thread-max-messages", "1", "--tombstone-age-s", "0.001"]

    dry = cli("sweep", *bounds, "--dry-run", "--json", url=store_url)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert (report["messages"], report["message_threads"]) == (2, 1)
    assert (report["tombstones"], report["runs"]) == (1, 0)
    assert await app.thread_history("chat") == ["a", "b", "c"], "a dry run removes nothing"
    done = cli("sweep", *bounds, url=store_url)
    assert done.returncode == 0, done.stderr
    assert "removed 2 messages from the histories of 1 threads (each keeps its newest 1)" in done.stdout
    assert "removed 1 tombstones of deleted threads" in done.stdout
    assert await app.thread_history("chat") == ["c"]
    assert await store.thread_get(ThreadGetParams("bye")) is None, "the name is free again"
    for flag in ("--tombstone-age-s", "--thread-max-messages"):
        bad = cli("sweep", flag, "0", url=store_url)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
