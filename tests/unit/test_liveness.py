"""What a rescuer concludes from missing liveness marks, and whose pid it may read
(store.liveness)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runwright.store import _liveness as liveness
from runwright.store._liveness import (
    PF_EXITING,
    Unmarked,
    gone_here,
    hostname_of,
    pid_alive,
    runs_on,
    this_machine,
)

from ..pid_namespace import absent_pid, in_own_pid_namespace, require_pid_namespaces


def test_a_missing_mark_is_a_death_only_once_its_grace_has_passed():
    unmarked = Unmarked(grace_s=0.3)
    assert unmarked.dead([7], now=100.0) == []
    assert unmarked.next_look_in(100.1) is not None and abs(unmarked.next_look_in(100.1) - 0.2) < 1e-9
    assert unmarked.dead([7], now=100.2) == []
    assert unmarked.dead([7], now=100.31) == [7]


def test_a_mark_taken_again_within_its_grace_is_forgotten():
    unmarked = Unmarked(grace_s=0.3)
    assert unmarked.dead([7], now=100.0) == []
    assert unmarked.dead([], now=100.1) == []
    assert unmarked.next_look_in(100.1) is None
    assert unmarked.dead([7], now=100.35) == []  # missing again: a new grace


def test_a_worker_whose_process_is_known_gone_is_dead_at_once():
    unmarked = Unmarked(grace_s=0.3)
    assert unmarked.dead([7, 8], now=100.0, gone=[8]) == [8]
    assert unmarked.dead([7], now=100.31) == [7]


def test_pid_alive_tells_a_running_process_from_a_reaped_or_unreaped_dead_one():
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
        child.kill()
        # Not reaped yet: a zombie answers signal 0, but never runs again.
        while not _zombie(child.pid):
            pass
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)


def _with_fields(stat: bytes, **changed: bytes) -> bytes:
    """`stat` (a /proc/<pid>/stat line) with its state and flags fields changed."""
    name, rest = stat.rsplit(b")", 1)
    fields = rest.split()
    fields[0] = changed.get("state", fields[0])
    fields[6] = changed.get("flags", fields[6])
    return name + b") " + b" ".join(fields)


def test_a_process_being_torn_down_runs_no_more_before_it_is_a_zombie():
    # A SIGKILLed process's sockets close before it turns zombie; the window cannot be held
    # open from a test, so its /proc line is made from this process's own.
    with open("/proc/self/stat", "rb") as stat:
        mine = stat.read()
    assert runs_on(mine)
    flags = int(mine.rsplit(b")", 1)[1].split()[6])
    assert not runs_on(_with_fields(mine, flags=str(flags | PF_EXITING).encode()))
    assert not runs_on(_with_fields(mine, state=b"Z"))
    assert runs_on(_with_fields(mine, flags=str(flags & ~PF_EXITING).encode()))
    # A name may hold parentheses, spaces and what looks like fields: the last ')' ends it.
    tricky = b"42 (x) Z 1 4 (y) " + mine.rsplit(b")", 1)[1].lstrip()
    assert runs_on(tricky)
    assert runs_on(b"42 (x")  # unreadable: signal 0, which said alive, is trusted


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def _namespace_link(tmp_path: Path, target: str) -> str:
    link = tmp_path / "pid"
    link.symlink_to(target)
    return str(link)


def test_the_initial_pid_namespace_is_told_by_its_fixed_inode(tmp_path: Path):
    read = liveness._pid_namespace.__wrapped__  # noqa: SLF001 - uncached, on a given link
    assert read(_namespace_link(tmp_path, "pid:[4026531836]")) is None
    (tmp_path / "other").mkdir()
    assert read(_namespace_link(tmp_path / "other", "pid:[4026532175]")) == "pid:[4026532175]"


def test_an_unreadable_pid_namespace_is_one_of_this_process_alone(tmp_path: Path):
    read = liveness._pid_namespace.__wrapped__  # noqa: SLF001
    first, second = read(str(tmp_path / "absent")), read(str(tmp_path / "absent"))
    assert first is not None and first.startswith("pid:unknown-") and first != second


def test_this_machine_is_the_hostname_in_the_initial_pid_namespace():
    if os.readlink("/proc/self/ns/pid") != f"pid:[{liveness.INITIAL_PID_NS_INODE}]":
        pytest.skip("this test process runs in a pid namespace of its own")
    assert this_machine() == socket.gethostname()
    assert hostname_of(this_machine()) == socket.gethostname()


def test_hostname_of_drops_the_pid_namespace():
    assert hostname_of("box") == "box"
    assert hostname_of("box.example.org~pid:[4026532175]") == "box.example.org"
    assert hostname_of("box~pid:unknown-0f3a") == "box"


def test_only_a_process_of_this_machine_and_pid_namespace_is_judged_by_its_pid():
    dead = absent_pid()
    assert gone_here(this_machine(), dead)
    assert not gone_here(this_machine(), os.getpid())
    host = hostname_of(this_machine())
    for elsewhere in ("another-machine", f"{host}~pid:[4026532175]", f"{host}~pid:unknown-0f3a",
                      f"{this_machine()}~pid:[1]"):
        assert not gone_here(elsewhere, dead), elsewhere


# Run in a pid namespace of its own: what it writes as its host, and what it would judge
# of this test process (whose pid it cannot see) and of itself.
PEEK = """
import os, sys
from runwright.store._liveness import gone_here, this_machine
print(this_machine(), os.readlink("/proc/self/ns/pid"), gone_here(sys.argv[1], int(sys.argv[2])),
      gone_here(this_machine(), os.getpid()), gone_here(this_machine(), 999))
"""


def test_a_process_of_another_pid_namespace_is_another_machine():
    require_pid_namespaces()
    done = subprocess.run([*in_own_pid_namespace(500), sys.executable, "-c", PEEK, this_machine(),
                           str(os.getpid())], capture_output=True, text=True, timeout=60, check=True)
    machine, namespace, judges_us, judges_itself, judges_absent = done.stdout.split()
    assert machine == f"{hostname_of(this_machine())}~{namespace}" != this_machine()
    assert hostname_of(machine) == hostname_of(this_machine())
    # Our pid is absent there, yet we are not judged gone from there, nor it from here.
    assert (judges_us, judges_itself, judges_absent) == ("False", "False", "True")
    assert not gone_here(machine, 500) and not gone_here(machine, absent_pid())
