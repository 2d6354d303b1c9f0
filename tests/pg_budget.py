"""The suite's PostgreSQL connection budget, shared by the processes of a parallel run.

The test server is shared with other work (max_connections 100), so a run of this suite
must never hold more than `RUNWRIGHT_TEST_PG_BUDGET` (50) of its connections at once. Run
serially it holds those of one test; run in parallel (pytest-xdist), the tests of every
worker add up, and a test that starts worker processes on PostgreSQL holds a pool in each
(up to twenty connections or more).

So every test that uses PostgreSQL takes its share of the budget before its fixtures are set
up and gives it back after they are torn down (see tests/conftest.py): its weight, the most
connections it was measured to hold at once with some room (`pg_connections` marker, else a
default by kind). The shares are counted in one small file that the workers of the run
update under a file lock; a test whose share does not fit waits its turn (first come, first
served, so a large share is not starved by small ones), and one that still cannot have it
after `WAIT_S` fails saying so, with who holds the budget.

`Budget` is the counter alone: no pytest in it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from runwright.store._liveness import pid_alive  # a zombie holds no share either

__all__ = ["Budget", "BudgetExhausted", "DEFAULT_BUDGET"]

DEFAULT_BUDGET = 50
WAIT_S = 420.0  # under pytest's 600 s per test, which counts the wait (a fixture's)
POLL_S = 0.05


class BudgetExhausted(Exception):
    """A test could not have its share of the connection budget in time."""


@dataclass
class Budget:
    """A counting semaphore of `size` connections over the file `path` (shared by every
    process of one run), with first-come-first-served turns."""

    path: Path
    size: int

    def __post_init__(self) -> None:
        self._lock = FileLock(str(self.path) + ".lock")

    def _read(self) -> dict[str, list[dict[str, object]]]:
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            state = {}
        state.setdefault("held", [])
        state.setdefault("waiting", [])
        # A process that died (a worker killed by a crash) gives its shares back.
        for key in ("held", "waiting"):
            state[key] = [entry for entry in state[key] if pid_alive(int(str(entry["pid"])))]
        return state

    def _write(self, state: dict[str, list[dict[str, object]]]) -> None:
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.path)

    def acquire(self, weight: int, who: str, wait_s: float = WAIT_S) -> str:
        """Take `weight` connections of the budget for `who` (a test id); a ticket to give
        them back with `release`. Waits its turn; BudgetExhausted after `wait_s`."""
        if weight > self.size:
            raise BudgetExhausted(
                f"{who} needs {weight} PostgreSQL connections, more than the suite's whole budget "
                f"of {self.size} (RUNWRIGHT_TEST_PG_BUDGET)")
        ticket = uuid.uuid4().hex
        me = {"ticket": ticket, "pid": os.getpid(), "who": who, "weight": weight}
        deadline = time.monotonic() + wait_s
        queued = False
        while True:
            with self._lock:
                state = self._read()
                if not queued:  # in line
                    state["waiting"].append(me)
                    self._write(state)
                    queued = True
                in_use = sum(int(str(entry["weight"])) for entry in state["held"])
                first = state["waiting"] and state["waiting"][0]["ticket"] == ticket
                if first and in_use + weight <= self.size:
                    state["waiting"].pop(0)
                    state["held"].append(me)
                    self._write(state)
                    return ticket
                if time.monotonic() > deadline:
                    state["waiting"] = [e for e in state["waiting"] if e["ticket"] != ticket]
                    self._write(state)
                    holders = ", ".join(f"{e['who']} ({e['weight']})" for e in state["held"]) or "none"
                    raise BudgetExhausted(
                        f"{who} waited {wait_s:.0f} s for {weight} of the suite's {self.size} PostgreSQL "
                        f"connections (RUNWRIGHT_TEST_PG_BUDGET) and did not get them; {in_use} are "
                        f"held by: {holders}")
            time.sleep(POLL_S)

    def release(self, ticket: str) -> None:
        with self._lock:
            state = self._read()
            state["held"] = [e for e in state["held"] if e["ticket"] != ticket]
            state["waiting"] = [e for e in state["waiting"] if e["ticket"] != ticket]
            self._write(state)
