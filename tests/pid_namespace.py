"""Running a command in a pid namespace of its own, as a container (or `unshare --pid`, or
a pod) runs it: for the tests of liveness across pid namespaces (see
runwright.store._liveness.this_machine).

`in_own_pid_namespace(pid)` is a command prefix. The command runs under a small launcher
that is the namespace's pid 1 (the namespace and everything in it ends with it), and gets
`pid` there: a test picks with `absent_pid()` one that no process of its own namespace has,
so that a process reading that pid here (the bug these tests are about) finds nothing.
`--kill-child` ends the namespace when `unshare` itself is killed, so SIGKILL of the
process a test started kills the command too.

Where unshare is not permitted (no CAP_SYS_ADMIN, seccomp, not Linux), `require_pid_namespaces`
skips the test with the reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

import pytest

__all__ = ["absent_pid", "in_own_pid_namespace", "pid_namespace_refusal", "require_pid_namespaces"]

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]

# The namespace's pid 1: makes the next pid `argv[1]`, then runs the rest of argv as its
# child and exits with its status.
LAUNCHER = """
import subprocess, sys
first = int(sys.argv[1])
with open("/proc/sys/kernel/ns_last_pid", "w") as last:
    last.write(str(first - 1))
sys.exit(subprocess.call(sys.argv[2:]))
"""

PROBE_PID = 300


def in_own_pid_namespace(pid: int) -> list[str]:
    """The prefix that runs a command in a new pid namespace, as pid `pid` there."""
    return [*UNSHARE, sys.executable, "-c", LAUNCHER, str(pid)]


@functools.cache
def pid_namespace_refusal() -> str | None:
    """Why a command cannot be run in a pid namespace of its own here; None if it can."""
    if not sys.platform.startswith("linux"):
        return f"pid namespaces are Linux's ({sys.platform})"
    if shutil.which("unshare") is None:
        return "no unshare command (util-linux)"
    probe = [*in_own_pid_namespace(PROBE_PID), sys.executable, "-c",
             "import os; print(os.getpid(), os.readlink('/proc/self/ns/pid'))"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare --pid failed: {exc}"
    if done.returncode != 0:
        return f"unshare --pid is not permitted here: {done.stderr.strip()[-300:]}"
    pid, _, namespace = done.stdout.strip().partition(" ")
    if pid != str(PROBE_PID):
        return f"cannot choose a pid in a new pid namespace (got {done.stdout.strip()!r})"
    if namespace == os.readlink("/proc/self/ns/pid"):
        return "unshare --pid ran the command in this pid namespace"
    return None


def require_pid_namespaces() -> None:
    """Skip the calling test, with the reason, where pid namespaces cannot be made."""
    reason = pid_namespace_refusal()
    if reason is not None:
        pytest.skip(reason)


def absent_pid() -> int:
    """A pid that no process of this namespace has now (high, far from where new
    processes are numbered after a wrap-around)."""
    with open("/proc/sys/kernel/pid_max") as limit:
        top = int(limit.read()) - 1
    for pid in range(top, PROBE_PID, -1):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    raise AssertionError("every pid of this namespace is taken")
