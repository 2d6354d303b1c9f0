"""Worker processes "of another machine": each started in a pid namespace of its own, as a
container (or `unshare --pid`, or a pod) runs it, so that no process of this machine can
judge it by its pid (runwright.store.liveness.this_machine). The namespace is made as the
pid-namespace tests make it (tests/pid_namespace.py): `unshare --pid --fork --mount-proc
--kill-child` and a launcher that is the namespace's pid 1 and gives the command the pid it
is asked for. Each namespace gets a pid range of its own, so that the PostgreSQL sessions
of two namespaces' workers (named `runwright:<schema>:<pid>`) are never taken for each
other's.

A worker of a namespace is found from this machine by the host it wrote (`host~pid:[inode]`)
and the pid it wrote (its pid in that namespace): `host_pid` reads `/proc/*/ns/pid` and the
last field of `NSpid` in `/proc/*/status` (we see every namespace's processes from here).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from runwright.store._liveness import MACHINE_SEPARATOR
from tests.pid_namespace import in_own_pid_namespace, pid_namespace_refusal

from .common import BenchError, Workers

__all__ = ["ApartWorkers", "host_pid", "refusal"]

FIRST_PID = 20_000  # the pid of the first namespace's first process; well below pid_max
PID_RANGE = 1_000  # pids a namespace may use: its supervisor, its workers, their restarts


def refusal() -> str | None:
    """Why processes cannot be started in pid namespaces of their own here; None if they can."""
    return pid_namespace_refusal()


class ApartWorkers(Workers):
    """`runwright worker` processes, each `start` in a pid namespace of its own; with
    `processes` > 1 the namespace runs `runwright worker -p N` (a supervisor and N worker
    processes that share the namespace, as on one machine)."""

    def __init__(self, app_spec: str, url: str, concurrency: int, log_dir: Path, processes: int = 1) -> None:
        super().__init__(app_spec, url, concurrency, log_dir)
        self.processes = processes
        self.extra_args = ["--processes", str(processes)]
        self._first_pid: dict[int, int] = {}  # unshare's pid (here) -> its namespace's first pid
        self._pending_first = FIRST_PID  # the range `command` chose for the next namespace

    def command(self) -> list[str]:
        # The lowest range no live namespace uses, and none holding this process's pid (a
        # session named after it would be cut with the worker's).
        taken = {first for proc, first in self._first_pid.items()
                 if any(p.pid == proc for p in self.procs)}
        first = FIRST_PID
        while first in taken or first <= os.getpid() < first + PID_RANGE:
            first += PID_RANGE
        self._pending_first = first
        return [*in_own_pid_namespace(first), *super().command()]

    def start(self, count: int) -> None:
        for _ in range(count):
            super().start(1)
            self._first_pid[self.procs[-1].pid] = self._pending_first

    def holder(self, worker_pid_here: int) -> subprocess.Popen[bytes]:
        """The `unshare` process of the namespace where the process `worker_pid_here` runs."""
        pid = worker_pid_here
        while pid > 1:
            for proc in self.procs:
                if proc.pid == pid:
                    return proc
            pid = _ppid(pid)
        raise BenchError(f"process {worker_pid_here} is in none of this benchmark's namespaces")

    def kill_worker(self, worker_pid_here: int) -> None:
        """SIGKILL one worker process of a namespace. Alone in it: its launcher (the
        namespace's pid 1) reaps it at once and exits, and so does `unshare`, which is
        reaped here. With siblings: their supervisor reaps it and starts another."""
        proc = self.holder(worker_pid_here)
        os.kill(worker_pid_here, signal.SIGKILL)
        if self.processes == 1:
            proc.wait(10)
            self.procs.remove(proc)

    def stop(self, proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
        """SIGTERM the namespace's command (the worker, or its supervisor, which passes it
        on): `unshare` forwards no signal, and the namespace's pid 1 (the launcher) obeys
        only SIGKILL from here. SIGKILL of `unshare` (and so of the namespace) if it does
        not end in time."""
        for child in _children(proc.pid):
            for command in _children(child):  # unshare -> the launcher -> the command
                try:
                    os.kill(command, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        self.reap(proc, grace_s)


def host_pid(machine: str, pid: int) -> int:
    """This machine's pid of the process that wrote `machine` as its host and `pid` as its
    pid (in its own pid namespace)."""
    namespace = machine.partition(MACHINE_SEPARATOR)[2]  # pid:[inode]
    if not namespace:
        return pid  # of this pid namespace
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != namespace:
                continue
            if _status(int(entry), "NSpid").split()[-1] == str(pid):
                return int(entry)
        except (OSError, KeyError):
            continue  # ended meanwhile
    raise BenchError(f"no process here is pid {pid} of {machine}")


def _status(pid: int, key: str) -> str:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name == key:
                return value.strip()
    raise KeyError(key)


def _ppid(pid: int) -> int:
    try:
        return int(_status(pid, "PPid"))
    except (OSError, KeyError):
        return 0


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
