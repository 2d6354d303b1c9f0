"""Agent worker subprocesses for the process tests: `runwright worker
tests.process.agent_apps:app` processes whose model is a scripted OpenAI-protocol server
in the test's process, and the ledger their tools write (see agent_apps.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..agents.scripted_openai import Script, ScriptedOpenAI
from . import agent_apps
from .harness import ROOT, WorkerProcess

APP_SPEC = "tests.process.agent_apps:app"


@dataclass(frozen=True)
class ToolCall:
    """One execution of a tool, as its ledger line tells it."""

    tool: str
    pid: int
    detail: str  # the idempotency key, the order, or "-"


class AgentFleet:
    """A scripted model server and the agent workers of one test; `close` (run by the
    fixture) reaps every worker, then stops the server."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.ledger = tmp_path / "agent-ledger"
        self.ledger.mkdir()
        self.logs = tmp_path / "agent-logs"
        self.logs.mkdir()
        self.workers: list[WorkerProcess] = []
        self.model: ScriptedOpenAI | None = None

    def serve_model(self, script: Script) -> ScriptedOpenAI:
        """Start the model server the workers will talk to; it records every request."""
        assert self.model is None, "one model server per test"
        self.model = ScriptedOpenAI(script).__enter__()
        return self.model

    def start(self, lease_s: float | None = None, crash_points: str = "") -> WorkerProcess:
        """Start a worker on the model server; `crash_points` arms RUNWRIGHT_CRASH_POINTS
        in this worker only."""
        assert self.model is not None, "serve_model() first: the worker needs its model"
        name = f"w{len(self.workers) + 1}"
        argv = [sys.executable, "-m", "runwright", "worker", APP_SPEC, "--url", self.url]
        if lease_s is not None:
            argv += ["--lease-s", str(lease_s)]
        env = {**os.environ, agent_apps.LEDGER_ENV: str(self.ledger), "RUNWRIGHT_LOG_LEVEL": "INFO",
               "OPENAI_BASE_URL": self.model.base_url, "OPENAI_API_KEY": "test",
               "RUNWRIGHT_CRASH_POINTS": crash_points}
        log_path = self.logs / f"{name}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = WorkerProcess(name, proc, log_path, log)
        self.workers.append(worker)
        return worker

    def by_pid(self, pid: int) -> WorkerProcess:
        (worker,) = [w for w in self.workers if w.pid == pid]
        return worker

    def calls(self, tool: str) -> list[ToolCall]:
        """Every execution of `tool` in every process, in no particular order."""
        found = []
        for path in sorted(self.ledger.glob("*.log")):
            for line in path.read_text().splitlines():
                name, pid, detail = line.split()
                if name == tool:
                    found.append(ToolCall(name, int(pid), detail))
        return found

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        if self.model is not None:
            self.model.__exit__(None, None, None)

    def dump_logs(self) -> str:
        return "\n".join(f"----- worker {w.name} (pid {w.pid}) -----\n{w.log()}" for w in self.workers)


def stopped(pid: int) -> bool:
    """True while the process is stopped (SIGSTOP): state T in /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name, in parentheses, may hold spaces: the state follows its ')'.
        return stat.read().rpartition(")")[2].split()[0] == "T"


def sqlite_write_lock_free(store_url: str) -> bool:
    """True unless a process holds the SQLite database's write lock (and keeps it 5 s)."""
    conn = sqlite3.connect(store_url[len("sqlite:///"):], timeout=5.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # "database is locked"
        return False
    finally:
        conn.close()
