"""Verify's own worker processes: real `runwright worker` subprocesses of the verify app,
one per slot, each in a session of its own (a Ctrl-C reaches verify, which then ends
them: none is left behind), restarted in its slot after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ._workload import APP_SPEC, LEDGER_ENV, QUEUE

__all__ = ["Pool"]

CONCURRENCY = 8
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, SIGKILL it when verify dies, even by SIGKILL
    (its cleanup cannot run then, but no worker is left running)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Pool:
    def __init__(self, url: str, size: int, lease_s: float, ledger: Path, logs: Path) -> None:
        self.url = url
        self.lease_s = lease_s
        self.ledger = ledger
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopped: set[int] = set()  # slots whose process is SIGSTOPped now
        self.lives = 0
        self.exits: list[str] = []  # log tails of processes that exited on their own
        self.log_paths: list[Path] = []
        for slot in range(size):
            self.log_paths.append(self.logs)
            self.procs.append(self._spawn(slot))

    def _spawn(self, slot: int) -> subprocess.Popen[bytes]:
        self.lives += 1
        self.log_paths[slot] = self.logs / f"worker-{self.lives}.log"
        argv = [sys.executable, "-m", "runwright", "worker", APP_SPEC, "--url", self.url,
                "-q", QUEUE, "-c", str(CONCURRENCY), "--lease-s", str(self.lease_s),
                "--drain-grace-s", "1"]
        env = {**os.environ, LEDGER_ENV: str(self.ledger), "RUNWRIGHT_LOG_LEVEL": "WARNING"}
        with open(self.log_paths[slot], "wb") as log:
            return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_die_with_parent)

    def pid(self, slot: int) -> int:
        return self.procs[slot].pid

    def crashed(self) -> list[str]:
        """The log tails of workers that exited on their own (not killed by verify)."""
        return [self.tail(i) for i, proc in enumerate(self.procs) if proc.poll() is not None]

    def tail(self, slot: int) -> str:
        text = self.log_paths[slot].read_text(errors="replace")
        lines = [line for line in text.splitlines() if line.strip()]
        return f"worker slot {slot} exited ({self.procs[slot].returncode}): {' | '.join(lines[-3:])}"

    def kill(self, slot: int) -> None:
        """SIGKILL the slot's process and start a new one in its place."""
        proc = self.procs[slot]
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self.stopped.discard(slot)
        self.procs[slot] = self._spawn(slot)

    def stop(self, slot: int) -> None:
        self.procs[slot].send_signal(signal.SIGSTOP)
        self.stopped.add(slot)

    def resume(self, slot: int, pid: int | None = None) -> None:
        """SIGCONT the slot's process (only if it is still process `pid`, when given)."""
        if slot in self.stopped and (pid is None or self.procs[slot].pid == pid):
            self.procs[slot].send_signal(signal.SIGCONT)
            self.stopped.discard(slot)

    def close(self) -> None:
        """End every process now (verify's store is dropped next: nothing to drain)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()
