"""The `runwright` command as a user runs it: real processes on every backend."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import runwright as rw
from runwright.store._params import (
    RunClaimParams,
    RunCountParams,
    RunFinishParams,
    RunListParams,
    WorkerRegisterParams,
)

from ..conformance.helpers import stamp_schema
from . import apps
from .harness import APP_SPEC, ROOT, wait_until

pytestmark = pytest.mark.process


def runwright(*args: str, url: str, timeout_s: float = 120, cwd=ROOT,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RUNWRIGHT_URL": url, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "runwright", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


async def test_submit_wait_show_runs_cancel_retry_dead(app: rw.App, store_url: str, tmp_path) -> None:
    worker = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC, "-c", "4",
                               "--url", store_url], cwd=ROOT,
                              env={**os.environ, apps.LEDGER_ENV: str(tmp_path)},
                              stderr=subprocess.DEVNULL)
    try:
        done = runwright("submit", APP_SPEC, "record", "--args", '{"n": 41}', "--key", "k1",
                         "--wait", url=store_url)
        assert done.returncode == 0, done.stderr
        assert "submitted (key k1" in done.stdout and "41" in done.stdout
        run_id = done.stdout.split()[1]
        again = runwright("submit", APP_SPEC, "record", "--args", '{"n": 41}', "--key", "k1", url=store_url)
        assert again.returncode == 0 and "exists (key k1, state succeeded)" in again.stdout
        other = runwright("submit", APP_SPEC, "record", "--args", '{"n": 1}', "--key", "k1", url=store_url)
        assert other.returncode == 2 and other.stdout == ""
        assert other.stderr.splitlines() == [
            f"error: KeyConflict: key 'k1' names run {run_id}, which was submitted with other arguments; "
            f"give another key, or on_conflict='return' to get run {run_id} as it is"]
        taken = runwright("submit", APP_SPEC, "record", "--args", '{"n": 1}', "--key", "k1",
                          "--on-conflict", "return", url=store_url)
        assert taken.returncode == 0 and f"run {run_id} exists (key k1, state succeeded)" in taken.stdout
        shown = runwright("show", run_id, url=store_url)
        assert "succeeded" in shown.stdout and "result 41" in shown.stdout
        listed = runwright("runs", "--state", "succeeded", "--task", "record", url=store_url)
        assert f"│ {run_id} " in listed.stdout and "record" in listed.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    # With no worker running: a queued run is cancelled at once; a dead one is retried.
    queued = await app.submit(apps.record, n=2)
    cancelled = runwright("cancel", str(queued.id), url=store_url)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    ended = runwright("cancel", str(queued.id), url=store_url)
    assert ended.returncode == 2 and "RunEnded" in ended.stderr and "already ended" in ended.stderr
    unknown = runwright("show", "987654", url=store_url)
    assert unknown.returncode == 5 and "RunNotFound" in unknown.stderr
    bad_state = runwright("runs", "--state", "sleeping", url=store_url)
    assert bad_state.returncode == 2 and "unknown state 'sleeping'" in bad_state.stderr
    bad_args = runwright("submit", APP_SPEC, "record", "--args", "{nope", url=store_url)
    assert bad_args.returncode == 2 and "--args is not JSON" in bad_args.stderr
    unknown_task = runwright("submit", APP_SPEC, "nope", url=store_url)
    assert unknown_task.returncode == 2 and "unknown task 'nope'" in unknown_task.stderr
    assert (await app.store.run_count_by_state(RunCountParams())) == {"succeeded": 1, "cancelled": 1}


async def test_retry_of_a_dead_run_from_the_command_line(app: rw.App, store_url: str) -> None:
    handle = await app.submit(apps.record, n=5)
    wid = await app.store.worker_register(WorkerRegisterParams("h", os.getpid(), ["default"], ["record"]))
    (run,) = await app.store.run_claim(RunClaimParams(wid, ["default"], ["record"], 1, 30))
    await app.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.DEAD,
                                                     error='{"type":"X"}')])
    dead = runwright("dead", url=store_url)
    assert f"│ {handle.id} " in dead.stdout and "dead" in dead.stdout
    shown = runwright("show", str(handle.id), url=store_url)
    assert "attempts" in shown.stdout and "dead" in shown.stdout
    retried = runwright("retry", "--all-dead", url=store_url)
    assert retried.returncode == 0 and f"run {handle.id}: queued" in retried.stdout
    assert "1 re-queued, 0 refused" in retried.stdout
    assert (await handle.refresh()).state is rw.RunState.QUEUED
    again = runwright("retry", str(handle.id), url=store_url)
    assert again.returncode == 2 and "not retried" in again.stderr


async def test_pause_and_resume_from_the_command_line(app: rw.App, store_url: str) -> None:
    handle = await app.submit(apps.record, n=5, delay_s=3600)
    paused = runwright("pause", str(handle.id), url=store_url)
    assert paused.returncode == 0 and paused.stdout.strip() == f"run {handle.id}: paused", paused.stderr
    assert (await handle.refresh()).paused
    listed = runwright("runs", "--waiting", "paused", url=store_url)
    assert f"│ {handle.id} " in listed.stdout and "paused" in listed.stdout
    shown = runwright("show", str(handle.id), url=store_url)
    assert "it is paused" in shown.stdout
    resumed = runwright("resume", str(handle.id), url=store_url)
    assert resumed.returncode == 0 and resumed.stdout.strip() == f"run {handle.id}: resumed"
    again = runwright("resume", str(handle.id), url=store_url)
    assert again.returncode == 2 and "RunNotPaused" in again.stderr and len(again.stderr.splitlines()) == 1
    runwright("pause", str(handle.id), url=store_url)
    bulk = runwright("bulk", "resume", "--task", "record", url=store_url)
    assert bulk.returncode == 0, bulk.stderr
    assert not (await handle.refresh()).paused
    unknown = runwright("pause", "987654", url=store_url)
    assert unknown.returncode == 5 and "RunNotFound" in unknown.stderr


async def test_a_result_is_awaited_in_a_process_that_did_not_submit_it(app: rw.App, store_url: str,
                                                                       tmp_path) -> None:
    handle = await app.submit(apps.record, n=7)
    waiter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import asyncio, json, runwright as rw
        async def main():
            async with rw.App({store_url!r}) as app:
                print(json.dumps(await (await app.get({handle.id})).result(timeout_s=120)))
        asyncio.run(main())
    """)], stdout=subprocess.PIPE, text=True)
    try:
        await wait_until(lambda: "waiting" if waiter.poll() is None else "exited", "waiter is up")
        worker = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC,
                                   "--url", store_url], cwd=ROOT,
                                  env={**os.environ, apps.LEDGER_ENV: str(tmp_path)},
                                  stderr=subprocess.DEVNULL)
        try:
            out, _ = waiter.communicate(timeout=120)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
    finally:
        waiter.kill()
    assert waiter.returncode == 0 and json.loads(out) == 7


async def test_processes_option_runs_a_supervised_pool_that_stops_on_sigterm(app: rw.App, store_url: str,
                                                                             tmp_path) -> None:
    pool = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC, "-p", "2",
                             "-c", "5", "--url", store_url], cwd=ROOT,
                            env={**os.environ, apps.LEDGER_ENV: str(tmp_path)},
                            stderr=subprocess.DEVNULL)
    try:
        await wait_until(lambda: _workers(app, 2), "two worker processes registered")
        handles = await app.submit_many(apps.record, [{"n": n} for n in range(50)])
        assert [await h.result(timeout_s=60) for h in handles] == list(range(50))
        pids = {w.pid for w in await app.store.worker_list()}
        assert len(pids) == 2 and pool.pid not in pids
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0
        assert await app.store.worker_list() == []
    finally:
        pool.kill()


@pytest.mark.parametrize("url, message", [
    ("postgresql://postgres@127.0.0.1:1/nope", "postgresql: cannot connect to postgresql://postgres@127.0.0.1:1"),
    ("redis://127.0.0.1:1/0", "redis: cannot connect to redis://127.0.0.1:1/0"),
    ("sqlite:////no/such/dir/x.db", "sqlite: directory /no/such/dir does not exist"),
])
def test_serve_with_the_store_unreachable_is_one_line_and_exit_3(url: str, message: str) -> None:
    served = runwright("serve", APP_SPEC, "--port", "9", url=url, timeout_s=60,
                       env={"RUNWRIGHT_TOKENS": "t=tenant"})
    assert served.returncode == 3, served.stderr
    (line,) = served.stderr.strip().splitlines()
    assert line.startswith(f"error: StoreUnreachable: {message}"), line


@pytest.mark.parametrize("args, code, message", [
    (["worker", APP_SPEC, "--url", "postgresql://postgres@127.0.0.1:1/nope"], 3,
     "StoreUnreachable: postgresql: cannot connect to postgresql://postgres@127.0.0.1:1/nope"),
    (["worker", "no_such_module:app"], 2, "ConfigError: cannot import 'no_such_module'"),
])
def test_a_pool_whose_workers_cannot_start_says_so_once(args, code, message) -> None:
    """What would stop every worker at its start stops the pool before it starts any: its
    error once, in one line, with the worker's exit code (not once per process and try)."""
    pool = runwright(*args, "-p", "2", url="sqlite:///unused.db", timeout_s=120)
    assert pool.returncode == code, pool.stderr
    (line,) = pool.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}"), pool.stderr


async def test_a_pool_restarts_a_worker_that_crashed_after_it_started(app: rw.App, store_url: str,
                                                                       tmp_path) -> None:
    """Only a failure at start ends the pool: a worker that ran and then died (SIGKILL
    here, an OOM kill in life) is restarted, however many times it happens."""
    pool = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC, "-p", "2",
                             "--url", store_url], cwd=ROOT,
                            env={**os.environ, apps.LEDGER_ENV: str(tmp_path)},
                            stderr=subprocess.DEVNULL)
    try:
        pids = {w.pid for w in await wait_until(lambda: _live_workers(app, 2), "two workers started")}
        for _ in range(3):  # more than the start failures the pool tolerates
            victim = min(pids)
            os.kill(victim, signal.SIGKILL)
            pids = {w.pid for w in await wait_until(
                lambda: _live_workers(app, 2, without=victim), "the killed worker is replaced")}
            assert victim not in pids and pool.poll() is None
        handle = await app.submit(apps.record, n=3)
        assert await handle.result(timeout_s=60) == 3
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0
    finally:
        pool.kill()


async def _live_workers(app: rw.App, count: int, without: int = 0) -> list | None:
    """The registered workers whose process is alive (a killed one stays registered until
    found dead), when there are `count` of them and none is pid `without`."""
    live = [w for w in await app.store.worker_list() if w.pid != without and _alive(w.pid)]
    return live if len(live) == count else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _workers(app: rw.App, count: int) -> bool:
    return len(await app.store.worker_list()) == count


def test_the_readme_demo_finishes_every_run_exactly_once(tmp_path) -> None:
    """The README's first command ends with the demo, on the embedded SQLite default."""
    env = {k: v for k, v in os.environ.items() if k != "RUNWRIGHT_URL"}
    demo = subprocess.run([sys.executable, "-m", "runwright", "demo", "--runs", "120", "--workers", "3"],
                          cwd=tmp_path, env={**env, "COLUMNS": "200"}, capture_output=True,
                          text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    rows = {cells[0]: cells[1] for line in demo.stdout.splitlines()
            if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 2}
    assert rows["runs submitted"] == "120"
    assert rows["finished succeeded (one fenced finish each)"] == "120"
    assert rows["results wrong"] == rows["not finished"] == "0"
    # It wrote in a temporary folder of its own, which it named and removed: nothing is left here.
    assert list(tmp_path.iterdir()) == []
    (work,) = re.findall(r"\(its files in (\S+), removed at the end\)", demo.stdout)
    assert not Path(work).exists() and Path(work).parent == Path(tempfile.gettempdir())
    # What it says of the kill is of the killed worker alone: the runs it held, all taken over.
    (kill,) = [line for line in demo.stdout.splitlines() if line.startswith("SIGKILL")]
    found = re.fullmatch(r"SIGKILL worker pid (\d+) with (\d+) runs in flight on it \((\d+) running on all 3 "
                         r"workers\)", kill)
    assert found, kill
    pid, in_flight, running = found.groups()
    assert 0 < int(in_flight) <= 8 and int(in_flight) <= int(running) <= 24  # --concurrency 8 each
    assert rows[f"in flight on the killed worker (pid {pid}) at the kill"] == in_flight
    assert rows["of them taken over by another worker, and finished"] == in_flight
    # The throughput is given with the sleep that bounds it, and that bound.
    assert re.fullmatch(r"\d+ runs/s over [\d.]+ s, each run sleeping 0.1-0.3 s",
                        rows["throughput, first submission to last end (the kill included)"])
    assert rows["the most such sleeps allow on 24 slots (3 x 8)"] == "120 runs/s (a run does no CPU work)"
    assert "OK: every run finished, exactly once" in demo.stdout


async def test_migrate_then_a_newer_schema_is_refused_at_start(backend: str, store_url: str) -> None:
    from runwright.store import store_from_url

    store = store_from_url(store_url)
    known = store.schema_version_known
    # Redis has no schema: its numbered versions are of its key layout, and say so.
    assert store.schema_noun == ("key layout" if store_url.startswith("redis") else "schema")
    first = runwright("migrate", url=store_url)
    assert first.returncode == 0
    assert f"{store.schema_noun} at version {known}; applied {list(range(1, known + 1))}" in first.stdout
    again = runwright("migrate", url=store_url)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    async with rw.App(store_url) as app:  # a later runwright stamped a newer schema
        await stamp_schema(app.store, 99)
    worker = runwright("worker", APP_SPEC, url=store_url, timeout_s=60)
    assert worker.returncode == 4, worker.stderr
    assert "SchemaError" in worker.stderr and "newer than this runwright knows" in worker.stderr
    assert f"has {store.schema_noun} version 99" in worker.stderr
    assert "Traceback" not in worker.stderr
    with pytest.raises(rw.SchemaError, match="Nothing was written"):
        await rw.App(store_url).open()


async def test_follow_prints_the_log_live_and_exits_with_the_outcome(app: rw.App, store_url: str,
                                                                      tmp_path) -> None:
    handle = await app.submit(apps.record, n=3)
    follower = subprocess.Popen([sys.executable, "-m", "runwright", "follow", str(handle.id)],
                                env={**os.environ, "RUNWRIGHT_URL": store_url, "COLUMNS": "200"},
                                stdout=subprocess.PIPE, text=True)
    worker = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC, "--url", store_url],
                              cwd=ROOT, env={**os.environ, apps.LEDGER_ENV: str(tmp_path)},
                              stderr=subprocess.DEVNULL)
    try:
        out, _ = follower.communicate(timeout=120)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        follower.kill()
    lines = [line.split() for line in out.splitlines()]
    assert follower.returncode == 0
    assert [(int(cells[0]), cells[2]) for cells in lines] == [(1, "submitted"), (2, "started"),
                                                              (3, "succeeded")]
    cancelled = await app.submit(apps.record, n=4)
    await cancelled.cancel()
    replay = runwright("follow", str(cancelled.id), url=store_url)
    assert replay.returncode == 1 and [line.split()[2] for line in replay.stdout.splitlines()] == [
        "submitted", "cancelled"]


async def test_schedules_are_listed_paused_resumed_and_deleted(app: rw.App, store_url: str) -> None:
    spec = app.schedule_spec("nightly", cron="0 9 * * 1-5", task=apps.record, args={"n": 1},
                             tz="Europe/Paris", misfire="skip", catch_up_limit=10, queue=None,
                             priority=None)
    await app.save_schedule(spec)
    listed = runwright("schedules", url=store_url)
    assert listed.returncode == 0, listed.stderr
    assert "nightly" in listed.stdout and "0 9 * * 1-5" in listed.stdout
    assert "T09:00:00+01:00" in listed.stdout or "T09:00:00+02:00" in listed.stdout  # Paris, CET or CEST
    assert runwright("schedules", "pause", "nightly", url=store_url).returncode == 0
    assert "paused" in runwright("schedules", url=store_url).stdout
    assert runwright("schedules", "resume", "nightly", url=store_url).returncode == 0
    assert "active" in runwright("schedules", url=store_url).stdout
    unknown = runwright("schedules", "pause", "nope", url=store_url)
    assert unknown.returncode == 2 and "unknown schedule 'nope'" in unknown.stderr
    assert runwright("schedules", "delete", "nightly", url=store_url).returncode == 0
    assert await app.store.schedule_list() == []
    created = runwright("schedules", "create", "hourly", "--app", APP_SPEC, "--task", "record",
                        "--cron", "0 * * * *", "--args", '{"n": 2}', url=store_url)
    assert created.returncode == 0, created.stderr
    (hourly,) = await app.store.schedule_list()
    assert (hourly.name, hourly.cron, hourly.arguments()) == ("hourly", "0 * * * *", {"n": 2})
    malformed = runwright("schedules", "create", "bad", "--app", APP_SPEC, "--task", "record",
                          "--cron", "99 * * * *", "--args", '{"n": 2}', url=store_url)
    assert malformed.returncode == 2 and "malformed cron" in malformed.stderr


async def test_submit_a_builtin_job_from_json_without_an_app(app: rw.App, store_url: str, tmp_path) -> None:
    document = {"task": "chain", "key": "from-json",
                "args": {"steps": [{"id": "hook", "type": "webhook",
                                    "args": {"url": "http://127.0.0.1:9/x"}}], "input": "x"}}
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(document))
    done = runwright("submit", "--json", f"@{spec}", url=store_url)
    assert done.returncode == 0, done.stderr
    assert "submitted (key from-json" in done.stdout
    (run,) = await app.store.run_list(RunListParams(task="chain"))
    assert run.arguments()["steps"][0]["type"] == "webhook"
    unknown = runwright("submit", "--json", '{"task": "teleport", "args": {}}', url=store_url)
    assert unknown.returncode == 2 and "unknown task 'teleport'" in unknown.stderr
    cycle = runwright("submit", "--json", json.dumps({"task": "chain", "args": {"steps": [
        {"id": "a", "type": "webhook", "needs": ["a"], "args": {"url": "http://x"}}]}}), url=store_url)
    assert cycle.returncode == 2 and "cycle" in cycle.stderr
    malformed = runwright("submit", "--json", "{nope", url=store_url)
    assert malformed.returncode == 2 and "--json is not JSON" in malformed.stderr
    assert (await app.store.run_count_by_state(RunCountParams())) == {"queued": 1}


async def test_status_summarises_the_store(app: rw.App, store_url: str) -> None:
    await app.submit(apps.record, n=1, delay_s=60)
    await app.submit(apps.record, n=2)  # due, and no live worker can run it
    shown = runwright("status", url=store_url)
    assert shown.returncode == 0, shown.stderr
    rows = {line.strip("│ ").split("│")[0].strip(): line.strip("│ ").split("│")[-1].strip()
            for line in shown.stdout.splitlines() if line.count("│") >= 2}
    assert rows["queued"] == "2" and rows["running"] == "0" and rows["workers alive"] == "0"
    assert rows["unrunnable"] == "1"


async def test_a_worker_serves_its_own_metrics(app: rw.App, store_url: str, tmp_path) -> None:
    import socket

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    handle = await app.submit(apps.record, n=5)
    worker = subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC, "--url", store_url,
                               "--metrics-port", str(port)], cwd=ROOT,
                              env={**os.environ, apps.LEDGER_ENV: str(tmp_path)}, stderr=subprocess.DEVNULL)
    try:
        await handle.result(timeout_s=60)

        async def scraped() -> str | None:
            try:
                async with httpx.AsyncClient() as http:
                    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            except httpx.TransportError:
                return None
            return text if 'outcome="succeeded",task="record"' in text else None

        text = await wait_until(scraped, "the worker's metrics show the run")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert 'runwright_attempts_finished_total{outcome="succeeded",task="record"} 1.0' in text
    assert 'runwright_attempts_total{task="record"} 1.0' in text
