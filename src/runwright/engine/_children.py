"""One worker child process of a supervised pool, and how it tells that it started.

A child that exits before its worker started (the store cannot be reached, the app
module cannot be imported, a setting is refused) failed to start: restarting it would
meet the same error again. The child says it started by writing a byte to a pipe the
supervisor gave it (the fd in RUNWRIGHT_READY_FD); what it printed last on stderr is its
message, which the supervisor repeats when it gives up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

__all__ = ["READY_FD_ENV", "Child", "tell_supervisor_started"]

READY_FD_ENV = "RUNWRIGHT_READY_FD"


def tell_supervisor_started() -> None:
    """In a child: the worker has started (a no-op in a process no supervisor started)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is None:
        return
    try:
        os.write(int(fd), b"1")
        os.close(int(fd))
    except (OSError, ValueError):
        pass  # the supervisor is gone: nobody is left to tell


class Child:
    """`python -m runwright ARGV` with its stderr relayed line by line to ours."""

    def __init__(self, slot: int, argv: Sequence[str]) -> None:
        self.slot = slot
        self.started_at = time.monotonic()
        self.last_line = ""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "runwright", *argv],
                                         stderr=subprocess.PIPE, pass_fds=(write_fd,),
                                         env={**os.environ, READY_FD_ENV: str(write_fd)})
        finally:
            os.close(write_fd)  # the child's copy is the only one: EOF once it exits
        self._ready_fd = read_fd
        assert self.proc.stderr is not None
        self._relay = threading.Thread(target=self._relay_stderr, args=(self.proc.stderr,),
                                       name=f"runwright-child-{slot}-stderr", daemon=True)
        self._relay.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def send_signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def reap(self) -> bool:
        """After the exit: whether the worker had started. Its last words are read first."""
        self._relay.join(timeout=5.0)
        try:
            started = os.read(self._ready_fd, 1) == b"1"
        except BlockingIOError:  # a grandchild holds the pipe open: it never wrote
            started = False
        os.close(self._ready_fd)
        return started

    def message(self) -> str:
        """The child's last line on stderr, without the `error:` its CLI put first."""
        return self.last_line.removeprefix("error:").strip() or "(it printed nothing)"

    def _relay_stderr(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            _write_all(sys.stderr.fileno(), raw)
            if raw.strip():
                self.last_line = raw.decode(errors="replace").strip()
        stream.close()


def _write_all(fd: int, data: bytes) -> None:
    """Relay a line; with our stderr gone, keep reading anyway, so the child never blocks."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass
