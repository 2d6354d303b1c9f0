"""Worker subprocesses, condition waits and ledger reading for the process tests."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Awaitable, Callable, Sequence

import runwright as rw
from runwright.runs import Run
from runwright.store.sqlite._liveness import write_lock_free

from . import apps

ROOT = Path(__file__).resolve().parents[2]  # the project: workers import `tests.process.apps`
APP_SPEC = "tests.process.apps:app"
DEADLINE_S = 60.0  # only so that a broken guarantee fails instead of hanging


async def wait_until(predicate: Callable[[], Any | Awaitable[Any]], what: str,
                     timeout_s: float = DEADLINE_S, interval_s: float = 0.05) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy; return that.
    The deadline is generous: it exists to end a test whose guarantee broke, and never
    measures speed."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s:.0f} s waiting until {what}")
        await asyncio.sleep(interval_s)


def outputs(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[str, str]:
    """A command's stdout and stderr once it exits; past `timeout_s` it is killed and the
    test fails with its stderr's tail (under pytest's own limit, which would leave the
    pipes open for a later test to trip on). The pipes are closed either way."""
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            command = " ".join(map(str, proc.args))[:160]
            raise AssertionError(f"{command} did not end within {timeout_s:.0f} s; its "
                                 f"stderr ended: {err.decode(errors='replace')[-4000:]}") from None
    return out.decode(errors="replace"), err.decode(errors="replace")


def client(url: str) -> rw.App:
    """An App on `url` that knows the workers' tasks (by name), for submitting and reading."""
    app = rw.App(url)
    app.tasks.update(apps.app.tasks)
    return app


@dataclass
class WorkerProcess:
    """One `runwright worker` subprocess; its stdout and stderr go to `log_path`."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exited(self) -> bool:
        return self.proc.poll() is not None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged(self, text: str, run_id: int) -> bool:
        """True when a line of this worker's log about run `run_id` contains `text`."""
        return any(text in line and f"run_id={run_id} " in f"{line} "
                   for line in self.log().splitlines())

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    async def wait_exit(self, what: str = "") -> int:
        await wait_until(lambda: self.exited, what or f"worker {self.name} exits")
        self._log.close()
        return self.proc.returncode

    async def wait_started(self) -> None:
        """Until the worker is up: before that, SIGTERM finds no handler and just kills it."""
        await wait_until(lambda: "worker started" in self.log(), f"worker {self.name} starts",
                         timeout_s=2 * DEADLINE_S)  # a cold start on a loaded machine is slow

    async def stop(self) -> int:
        """Graceful stop, as a deployment does it: SIGTERM, then wait for the exit."""
        self.signal(signal.SIGTERM)
        return await self.wait_exit(f"worker {self.name} exits after SIGTERM")

    def kill(self) -> None:
        """SIGKILL if still running (SIGCONT first, in case a test left it stopped)."""
        if not self.exited:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self._log.close()


class WorkerFleet:
    """Starts workers for one test; `kill_all` (run by the fixture) reaps every one."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.ledger = tmp_path / "ledger"
        self.ledger.mkdir()
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.workers: list[WorkerProcess] = []
        self.followers: list[Follower] = []

    def start(self, concurrency: int = 10, lease_s: float | None = None,
              drain_grace_s: float | None = None, env: dict[str, str] | None = None,
              app_spec: str = APP_SPEC, args: Sequence[str] = (),
              wrap: Sequence[str] = ()) -> WorkerProcess:
        """Start a worker; `env` adds variables for this one only (e.g. RUNWRIGHT_CRASH_POINTS),
        `args` options of `runwright worker` (e.g. --metrics-port), `wrap` a command
        prefix that runs it (e.g. in a pid namespace of its own: tests/pid_namespace.py;
        `pid` is then the prefix's process, and a SIGKILL of it must end the worker too)."""
        name = f"w{len(self.workers) + 1}"
        argv = [sys.executable, "-m", "runwright", "worker", app_spec, "-c", str(concurrency),
                "--url", self.url]
        if lease_s is not None:
            argv += ["--lease-s", str(lease_s)]
        if drain_grace_s is not None:
            argv += ["--drain-grace-s", str(drain_grace_s)]
        argv = [*wrap, *argv, *args]
        env = {**os.environ, apps.LEDGER_ENV: str(self.ledger), "RUNWRIGHT_LOG_LEVEL": "INFO",
               **(env or {})}
        log_path = self.logs / f"{name}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProcess(name, proc, log_path, log)
        self.workers.append(worker)
        return worker

    def follow(self, run_id: int, after: int = 0) -> Follower:
        """Start a process that follows the run's events after `after` (see FOLLOWER)."""
        name = f"f{len(self.followers) + 1}"
        out_path, err_path = self.logs / f"{name}.out", self.logs / f"{name}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", FOLLOWER, self.url, str(run_id), str(after)],
                                    cwd=ROOT, stdout=out, stderr=err)
        follower = Follower(name, proc, out_path, err_path)
        self.followers.append(follower)
        return follower

    def release(self, tag: str) -> None:
        """Let the held first starts of runs tagged `tag` finish (see apps.hold)."""
        apps.release_file(self.ledger, tag).touch()

    def open_gate(self, run_id: int, position: int) -> None:
        """Let step `position` of run `run_id` go past its gate (see apps.narrated_steps)."""
        apps.gate_file(self.ledger, run_id, position).touch()

    def ledger_lines(self) -> list[tuple[str, int, int, int]]:
        """Every ledger line of every process: (event, run_id, fence, pid)."""
        lines = []
        for path in sorted(self.ledger.glob("*.log")):
            for line in path.read_text().splitlines():
                event, run_id, fence, pid = line.split()
                lines.append((event, int(run_id), int(fence), int(pid)))
        return lines

    def events_by_run(self, event: str) -> dict[int, list[tuple[int, int]]]:
        """run_id -> [(fence, pid)] of every `event` line."""
        found: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for name, run_id, fence, pid in self.ledger_lines():
            if name == event:
                found[run_id].append((fence, pid))
        return found

    def kill_all(self) -> None:
        for worker in self.workers:
            worker.kill()
        for follower in self.followers:
            follower.kill()

    def dump_logs(self) -> str:
        return "\n".join(
            [f"----- worker {w.name} (pid {w.pid}) -----\n{w.log()}" for w in self.workers]
            + [f"----- follower {f.name} (pid {f.proc.pid}) -----\n{f.out_path.read_text()}"
               f"{f.err_path.read_text()}" for f in self.followers])


@dataclass
class ServerProcess:
    """One `runwright serve` subprocess on a port the system picked (`base` is its URL)."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    base: str = ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_listening(self) -> str:
        line = await wait_until(lambda: next((text for text in self.log().splitlines()
                                              if text.startswith("listening on")), None),
                                f"server {self.log_path.stem} listens", timeout_s=90)
        self.base = line.split()[-1]
        return self.base

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_server(url: str, logs: Path, app_spec: str, env: dict[str, str]) -> ServerProcess:
    """`runwright serve app_spec` on `url`, listening on a free port (see wait_listening)."""
    log_path = logs / f"s{len(list(logs.glob('s*.log'))) + 1}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "runwright", "serve", app_spec, "--port", "0",
                                 "--url", url], cwd=ROOT, env={**os.environ, **env}, stdout=log,
                                stderr=subprocess.STDOUT)
    return ServerProcess(proc, log_path)


# A follower in a process of its own: prints each event of a run after `after` as a JSON
# line, flushed at once, and exits after the run's terminal event.
FOLLOWER = """
import asyncio, json, sys
import runwright as rw

async def follow(url, run_id, after):
    async with rw.App(url, auto_migrate=False) as app:
        async for event in app.events(run_id, after=after):
            print(json.dumps({"seq": event.seq, "kind": event.kind}), flush=True)

asyncio.run(follow(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


@dataclass
class Follower:
    """One follower process (see FOLLOWER); stdout and stderr go to files of their own."""

    name: str
    proc: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path

    @property
    def exited(self) -> bool:
        return self.proc.poll() is not None

    def seen(self) -> list[tuple[int, str]]:
        """(seq, kind) of every event printed so far; a line cut short by a kill is left out."""
        text = self.out_path.read_text()
        complete = text[:text.rfind("\n") + 1]
        return [(item["seq"], item["kind"]) for item in map(json.loads, complete.splitlines())]

    async def wait_exit(self) -> int:
        await wait_until(lambda: self.exited, f"follower {self.name} exits")
        return self.proc.returncode

    def kill(self) -> None:
        if not self.exited:
            self.proc.kill()
        self.proc.wait()


async def sigstop_outside_a_write(worker: WorkerProcess | subprocess.Popen[bytes], store_url: str) -> None:
    """SIGSTOP the worker. On SQLite, a process stopped inside a write transaction keeps
    the database's single write lock, and every other worker waits on it: the lease cannot
    help then (a limit of SQLite, not what the tests are about). So check that the lock is
    free, and if the stopped worker holds it, let it run on and stop it again."""
    send = worker.signal if isinstance(worker, WorkerProcess) else worker.send_signal
    if not store_url.startswith("sqlite:"):
        send(signal.SIGSTOP)
        return

    def stopped_outside_a_write() -> bool:
        send(signal.SIGSTOP)
        if sqlite_write_lock_free(store_url):
            return True
        send(signal.SIGCONT)  # it holds the lock: let it run on, and try again
        return False

    await wait_until(stopped_outside_a_write, "the worker is stopped outside a write transaction")


def sqlite_write_lock_free(store_url: str) -> bool:
    """True unless a process holds the SQLite database's write lock (and keeps it 5 s)."""
    return write_lock_free(store_url[len("sqlite:///"):], 5.0)


async def owner_pid(app: rw.App, run: Run) -> int:
    """The pid of the worker process that holds `run` (it must be running)."""
    assert run.owner is not None, f"run {run.id} has no owner: {run}"
    workers = {w.id: w for w in await app.store.worker_list()}
    assert run.owner in workers, f"owner {run.owner} of run {run.id} is not registered: {workers}"
    return workers[run.owner].pid


async def runs_of(app: rw.App, handles: list[rw.RunHandle]) -> list[Run]:
    return await app.store.run_get_many([h.id for h in handles])
