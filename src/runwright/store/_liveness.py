"""Telling a dead worker from one that is reconnecting, for every store with a liveness
mark that lapses (PostgreSQL's session lock, Redis's key with a TTL).

A mark can go missing because the worker died, or because its connection was cut or the
database was away for a moment while the worker lives on and takes the mark again. What a
rescuer can know decides how long it waits:
- a worker of this machine whose process no longer runs cannot come back: it is dead at
  once, with no grace (its pid, read by `pid_alive`);
- any other worker (alive here, or of another machine, where a rescuer cannot tell a cut
  from a death) is dead once its mark has stayed missing for MISSING_GRACE_S: a blip costs
  no takeover (and no recovery counted toward max_recoveries), a death costs the grace.
A rescuer that can be woken when a mark drops looks again exactly when the grace ends
(`Unmarked.next_look_in`), not at its next poll.

"This machine" is a hostname and a pid namespace (`this_machine`): a pid means something
only in the namespace it was read in. Two containers (or `unshare --pid` sessions, or pods
with hostNetwork) may share a hostname while each has its own pid 7: a rescuer that read
another namespace's pid 7 in its own would find it absent (and take over a worker that
still runs) or find another process (and keep a dead one). So a process writes, as its
host, the hostname when it is in the initial pid namespace and `host~pid:[inode]`
otherwise, and judges by pid only a worker that wrote exactly what it writes itself
(`gone_here`).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import socket
from typing import Collection, Iterable

__all__ = ["MISSING_GRACE_S", "Unmarked", "gone_here", "hostname_of", "pid_alive", "runs_on", "this_machine"]

# A reconnect on a reachable database takes milliseconds on a quiet machine, but a cut
# PostgreSQL mark stayed missing up to 185 ms on a machine at load 8 (benchmarks/takeover,
# 20 blips), and a worker of the full suite's CI run, slowed sevenfold, missed the former
# 0.3 s grace: a living worker was taken over and its runs ran twice. A second leaves five
# times the worst seen; a death another machine's rescuer must judge by its mark costs it.
MISSING_GRACE_S = 1.0


class Unmarked:
    """What one rescuer has seen of missing marks: a worker is dead once its mark has
    been missing for MISSING_GRACE_S by this process's looks, or at once when its process
    is known gone."""

    def __init__(self, grace_s: float = MISSING_GRACE_S) -> None:
        self._grace_s = grace_s
        self._since: dict[int, float] = {}

    def dead(self, missing: Iterable[int], now: float, gone: Collection[int] = ()) -> list[int]:
        """The dead among the workers whose mark is `missing` at `now` (the store's
        clock); `gone`: those among them whose process is known to run no more."""
        missing = set(missing)
        self._since = {wid: since for wid, since in self._since.items() if wid in missing}
        for wid in missing:
            self._since.setdefault(wid, now)
        return sorted(wid for wid, since in self._since.items()
                      if now - since >= self._grace_s or wid in gone)

    def next_look_in(self, now: float) -> float | None:
        """Seconds from `now` until the first missing mark's grace ends (None: none is
        missing): a rescuer looks again then, to take over a death without waiting for
        its next poll."""
        if not self._since:
            return None
        return max(0.0, min(self._since.values()) + self._grace_s - now)


def pid_alive(pid: int) -> bool:
    """Does process `pid` of this machine still run?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return runs_on(stat.read())
    except OSError:
        return True  # no /proc: trust the signal


PF_EXITING = 0x4  # the kernel's task flag: the process is being torn down


def runs_on(stat: bytes) -> bool:
    """Will the process whose /proc/<pid>/stat reads `stat` run again? Not a zombie (a
    killed child its parent has not reaped: it answers signal 0 but never runs again), and
    not exiting: a SIGKILLed process closes its sockets (its PostgreSQL session ends, its
    rescuer is woken) before it turns zombie, and a rescuer that looked in between saw it
    running and gave it the grace of a process that might come back."""
    try:
        fields = stat.rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold anything
        state, flags = fields[0], int(fields[6])
    except (IndexError, ValueError):
        return True  # unreadable: trust the signal
    return state not in (b"Z", b"X") and not flags & PF_EXITING


# The inode of the initial pid namespace, fixed by the kernel (PROC_PID_INIT_INO, since
# Linux 3.8); every other pid namespace gets one allocated above it. Comparing our own
# namespace with pid 1's would not do: in a container, or under `unshare --mount-proc`,
# pid 1 is that namespace's own init and shares its namespace.
INITIAL_PID_NS_INODE = 0xEFFFFFFC
MACHINE_SEPARATOR = "~"  # never in a hostname (letters, digits, '-' and '.')
_NS_LINK = re.compile(r"pid:\[(\d+)\]")


@functools.cache
def _pid_namespace(link: str = "/proc/self/ns/pid") -> str | None:
    """`pid:[inode]` of this process's pid namespace; None in the initial one. When it
    cannot be read (no /proc, another system), a token of this process alone: no other
    process writes it, so no other is ever judged by its pid here (and none judges this
    one by its own)."""
    try:
        found = _NS_LINK.fullmatch(os.readlink(link))
    except OSError:
        found = None
    if found is None:
        return f"pid:unknown-{secrets.token_hex(8)}"
    return None if int(found.group(1)) == INITIAL_PID_NS_INODE else found.group(0)


def this_machine() -> str:
    """What a process writes as its host, for liveness: where its pid means something.
    The hostname in the initial pid namespace; `host~pid:[inode]` in any other."""
    namespace = _pid_namespace()
    host = socket.gethostname()
    return host if namespace is None else f"{host}{MACHINE_SEPARATOR}{namespace}"


def hostname_of(machine: str) -> str:
    """The hostname of what `this_machine` wrote (to show it, or to compare hosts)."""
    return machine.split(MACHINE_SEPARATOR, 1)[0]


def gone_here(machine: str, pid: int) -> bool:
    """Is the process `pid` that wrote `machine` as its host known to run no more? Only a
    process of this machine and this pid namespace can tell; of any other, never."""
    return machine == this_machine() and not pid_alive(pid)
