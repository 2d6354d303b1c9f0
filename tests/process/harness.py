"""Worker subprocesses, condition waits and ledger reading for the process tests."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Awaitable, Callable

import runwright as rw
from runwright.runs import Run

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

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    async def wait_exit(self, what: str = "") -> int:
        await wait_until(lambda: self.exited, what or f"worker {self.name} exits")
        self._log.close()
        return self.proc.returncode

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

    def start(self, concurrency: int = 10, lease_s: float | None = None,
              drain_grace_s: float | None = None) -> WorkerProcess:
        name = f"w{len(self.workers) + 1}"
        argv = [sys.executable, "-m", "runwright", "worker", APP_SPEC, "-c", str(concurrency),
                "--url", self.url]
        if lease_s is not None:
            argv += ["--lease-s", str(lease_s)]
        if drain_grace_s is not None:
            argv += ["--drain-grace-s", str(drain_grace_s)]
        env = {**os.environ, apps.LEDGER_ENV: str(self.ledger), "RUNWRIGHT_LOG_LEVEL": "INFO"}
        log_path = self.logs / f"{name}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProcess(name, proc, log_path, log)
        self.workers.append(worker)
        return worker

    def release(self, tag: str) -> None:
        """Let the held first starts of runs tagged `tag` finish (see apps.hold)."""
        apps.release_file(self.ledger, tag).touch()

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

    def dump_logs(self) -> str:
        return "\n".join(f"----- worker {w.name} (pid {w.pid}) -----\n{w.log()}"
                         for w in self.workers)


async def owner_pid(app: rw.App, run: Run) -> int:
    """The pid of the worker process that holds `run` (it must be running)."""
    assert run.owner is not None, f"run {run.id} has no owner: {run}"
    workers = {w.id: w for w in await app.store.worker_list()}
    assert run.owner in workers, f"owner {run.owner} of run {run.id} is not registered: {workers}"
    return workers[run.owner].pid


async def runs_of(app: rw.App, handles: list[rw.RunHandle]) -> list[Run]:
    return await app.store.run_get_many([h.id for h in handles])
