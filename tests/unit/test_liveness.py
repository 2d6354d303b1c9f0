"""What a rescuer concludes from missing liveness marks (store.liveness)."""

from __future__ import annotations

import os
import subprocess
import sys

from runwright.store.liveness import Unmarked, pid_alive


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


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
