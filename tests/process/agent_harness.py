"""Agent worker subprocesses for the process tests: `runwright worker
tests.process.agent_apps:app` processes whose model is a scripted OpenAI-protocol server
in the test's process, and the ledger their tools write (see agent_apps.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..agents.scripted_openai import Script, ScriptedOpenAI
from . import agent_apps
from .harness import WorkerFleet, WorkerProcess

APP_SPEC = "tests.process.agent_apps:app"


@dataclass(frozen=True)
class ToolCall:
    """One execution of a tool, as its ledger line tells it."""

    tool: str
    pid: int
    detail: str  # the idempotency key, the order, or "-"


class AgentFleet(WorkerFleet):
    """A WorkerFleet of agent workers whose model is a scripted server in the test's
    process; `close` (run by the fixture) reaps every worker, then stops the server."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        super().__init__(url, tmp_path)
        self.model: ScriptedOpenAI | None = None

    def serve_model(self, script: Script) -> ScriptedOpenAI:
        """Start the model server the workers will talk to; it records every request."""
        assert self.model is None, "one model server per test"
        self.model = ScriptedOpenAI(script).__enter__()
        return self.model

    def start(self, lease_s: float | None = None, crash_points: str = "") -> WorkerProcess:  # type: ignore[override]
        """Start a worker on the model server; `crash_points` arms RUNWRIGHT_CRASH_POINTS
        in this worker only."""
        assert self.model is not None, "serve_model() first: the worker needs its model"
        return super().start(lease_s=lease_s, app_spec=APP_SPEC, env={
            agent_apps.LEDGER_ENV: str(self.ledger), "OPENAI_BASE_URL": self.model.base_url,
            "OPENAI_API_KEY": "test", "RUNWRIGHT_CRASH_POINTS": crash_points})

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
        self.kill_all()
        if self.model is not None:
            self.model.__exit__(None, None, None)


def stopped(pid: int) -> bool:
    """True while the process is stopped (SIGSTOP): state T in /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name, in parentheses, may hold spaces: the state follows its ')'.
        return stat.read().rpartition(")")[2].split()[0] == "T"
