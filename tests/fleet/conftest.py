"""Fixtures of the fleet tests: fast presence clocks, a client App of the test's fleet,
and worker processes that are always reaped (SIGCONT first, then SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

import runwright as rw

ROOT = Path(__file__).resolve().parents[2]
APP_SPEC = "tests.fleet.fleet_app:app"
# Fast enough for tests, slow enough for a loaded machine: a row reads stale after 3 s
# without a heartbeat and is gone after 8 s.
FAST = {"RUNWRIGHT_FLEET_HEARTBEAT_S": "0.25", "RUNWRIGHT_FLEET_STALE_S": "3",
        "RUNWRIGHT_FLEET_TTL_S": "8", "RUNWRIGHT_FLEET_APPLY_WINDOW_S": "60"}


class Processes:
    """`runwright worker` subprocesses of one test, with their logs."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.ledger = tmp_path / "ledger"
        self.ledger.mkdir()
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str, env: dict[str, str] | None = None,
              drain_grace_s: float = 2.0) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "runwright", "worker", APP_SPEC, "--url", self.url,
                "--drain-grace-s", str(drain_grace_s), *args]
        full_env = {**os.environ, **FAST, "RUNWRIGHT_TEST_LEDGER": str(self.ledger),
                    "RUNWRIGHT_LOG_LEVEL": "INFO", **(env or {})}
        log_path = self.logs / f"p{len(self.procs) + 1}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((proc, log_path))
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        return next(path for p, path in self.procs if p is proc).read_text(errors="replace")

    def kill_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                if "--processes" in proc.args or "-p" in proc.args:  # type: ignore[operator]
                    proc.send_signal(signal.SIGINT)  # the supervisor stops its children too
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        pass
                proc.kill()
            proc.wait()

    def dump_logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')}" for _, path in self.procs)


@pytest.fixture
def fast_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
async def client(store_url: str, fast_fleet: None) -> AsyncIterator[rw.App]:
    """The test's App (version 1.0.0, the workers' fleet), opened: the schema exists before
    any worker starts."""
    app = rw.App(store_url, version="1.0.0")
    app.tasks.update({"work": _work_spec()})
    await app.open()
    yield app
    await app.close()


def _work_spec() -> rw.TaskSpec:
    from . import fleet_app

    return fleet_app.app.tasks["work"]


@pytest.fixture
def processes(store_url: str, tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(store_url, tmp_path)
    try:
        yield procs
    finally:
        procs.kill_all()
        print(procs.dump_logs())  # shown by pytest only when the test failed
