"""Running workers as processes: one in this process, or N children supervised.

The supervisor forwards SIGTERM/SIGINT to its children (each drains on its own), and
restarts a child that died unexpectedly, loudly, with a backoff; a child that exits 0 by
itself (a fleet recycle: it drained and left) is started again at once. A child that fails to
start (it exits before its worker started: the store unreachable, the app module missing)
is tried a few times, then the pool stops with that child's message and exit code.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from typing import Awaitable, Callable, Sequence

from ..observe._logs import event
from ._children import Child, tell_supervisor_started
from ._worker import Worker

__all__ = ["PoolCannotStart", "run_worker", "supervise"]

INFO, WARNING, ERROR = logging.INFO, logging.WARNING, logging.ERROR
# A child that fails this many starts in a row (it exits before its worker started) ends
# the pool: its error will not go away by itself, and restarting forever hides it.
START_ATTEMPTS = 3
START_BACKOFF_S = 1.0  # times the failures so far: a store that is coming up gets a chance


def event_loop_runner() -> asyncio.Runner:
    """uvloop when installed (the `fast` extra): it roughly halves the loop's overhead."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run_worker(make_worker: Callable[[], Worker], close: Callable[[], Awaitable[None]],
               on_started: Callable[[Worker], None] = lambda _worker: None) -> None:
    """Run one worker in this process until SIGTERM/SIGINT (a second signal: no grace);
    then `close` what it used (the App's connections and resources). `on_started` is
    called in the worker's loop once it has started (the probes attach to it)."""

    async def main() -> None:
        worker = make_worker()  # in the loop that runs it
        loop = asyncio.get_running_loop()
        signals = {"count": 0}

        def on_signal(signum: int) -> None:
            signals["count"] += 1
            if signals["count"] > 1:
                worker.config.drain_grace_s = 0
            event(INFO, f"received {signal.Signals(signum).name}; stopping", worker=worker.id)
            worker.stop()

        def started(running: Worker) -> None:
            tell_supervisor_started()
            on_started(running)

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            await worker.run(ready=started)
        finally:
            await close()

    # Everything imported so far (the app, pydantic models, the openai SDK: about a million
    # objects) lives as long as the process; frozen, the collector stops re-walking it on
    # every full collection, which otherwise costs a worker a good part of its time.
    gc.freeze()
    # What a run leaves behind is freed by reference counts (a worker that ran 20,000
    # runs of a drain left the collector 700 objects to find), but its tasks and futures
    # are containers: at the default threshold of 700 the collector passed a thousand
    # times in that drain, 6% of the worker's CPU. At twenty thousand: a tenth of the
    # passes, and the shared harness's drain 3% faster (4 alternated pairs).
    gc.set_threshold(20_000, 20, 50)
    with event_loop_runner() as runner:
        runner.run(main())


class PoolCannotStart(Exception):
    """A worker process failed to start START_ATTEMPTS times in a row: restarting it
    again would only repeat its error (`message`, its last line; `exit_code`, its code)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def supervise(argv_for_child: Sequence[str] | Callable[[int], Sequence[str]], processes: int,
              restart: bool = True) -> int:
    """Start `processes` children running `argv_for_child` (or what it gives for a slot,
    1..processes: each child its own metrics port); return when all have exited
    (the first non-zero exit code, else 0). A child that dies after its worker started is
    restarted; one that fails START_ATTEMPTS starts in a row ends the pool: the others are
    stopped and PoolCannotStart carries that child's message and exit code."""
    pool = _Pool(argv_for_child, restart)

    def forward(signum: int, _frame: object) -> None:
        pool.stop(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for slot in range(1, processes + 1):
        pool.spawn(slot)
    while pool.children or pool.respawn_at:
        time.sleep(0.2)
        pool.reap_exited()
        pool.respawn_due()
    if pool.cannot_start is not None:
        raise pool.cannot_start
    return pool.worst


class _Pool:
    """The children of one supervisor, by slot, and what to do when one exits."""

    def __init__(self, argv: Sequence[str] | Callable[[int], Sequence[str]], restart: bool) -> None:
        self.argv = argv if callable(argv) else lambda _slot: argv
        self.restart = restart
        self.children: dict[int, Child] = {}
        self.respawn_at: dict[int, float] = {}  # slot -> when to start it again (monotonic)
        self.failed_starts: dict[int, int] = {}
        self.stopping = False
        self.worst = 0
        self.cannot_start: PoolCannotStart | None = None

    def spawn(self, slot: int) -> None:
        child = self.children[slot] = Child(slot, self.argv(slot))
        event(INFO, "worker process started", slot=slot, pid=child.pid)
        if self.stopping:  # the signal came while it was being started
            child.send_signal(signal.SIGTERM)

    def respawn_due(self) -> None:
        now = time.monotonic()
        for slot, at in list(self.respawn_at.items()):
            # pop, not del: a signal handler may have emptied the dict since the copy.
            if at <= now and self.respawn_at.pop(slot, None) is not None and not self.stopping:
                self.spawn(slot)

    def stop(self, signum: int) -> None:
        self.stopping = True
        self.respawn_at.clear()  # waiting to be restarted: not any more
        for child in self.children.values():
            child.send_signal(signum)

    def reap_exited(self) -> None:
        for slot, child in list(self.children.items()):
            code = child.poll()
            if code is None:
                continue
            del self.children[slot]
            started = child.reap()
            if self.stopping or not self.restart:
                self.worst = self.worst or code
            elif started and code == 0:
                self._start_next_life(child)
            elif started:
                self._restart_crashed(child, code)
            else:
                self._retry_start(child, code)

    def _start_next_life(self, child: Child) -> None:
        """It drained and left on its own (a fleet recycle asked it to): start it again at
        once, as a new life of the fleet."""
        self.failed_starts[child.slot] = 0
        event(INFO, "worker process recycled; starting its next life", slot=child.slot,
              pid=child.pid)
        self.respawn_at[child.slot] = time.monotonic()

    def _restart_crashed(self, child: Child, code: int) -> None:
        """It ran, then died: the next life may well run (a crash, an OOM kill)."""
        self.failed_starts[child.slot] = 0
        event(ERROR, "worker process died; restarting it", slot=child.slot, pid=child.pid,
              exit_code=code)
        young = time.monotonic() - child.started_at < 5
        self.respawn_at[child.slot] = time.monotonic() + (2 if young else 0)  # no spinning

    def _retry_start(self, child: Child, code: int) -> None:
        """It never started: try a few times (a store still coming up), then give up."""
        failed = self.failed_starts[child.slot] = self.failed_starts.get(child.slot, 0) + 1
        if failed >= START_ATTEMPTS:
            self.cannot_start = PoolCannotStart(
                f"worker process {child.slot} failed to start {failed} times in a row "
                f"(exit code {code}): {child.message()}", code or 1)
            self.stop(signal.SIGTERM)
            return
        event(ERROR, "worker process failed to start; trying again", slot=child.slot,
              pid=child.pid, exit_code=code, attempt=failed)
        self.respawn_at[child.slot] = time.monotonic() + START_BACKOFF_S * failed
