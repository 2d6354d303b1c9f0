"""Running workers as processes: one in this process, or N children supervised.

The supervisor forwards SIGTERM/SIGINT to its children (each drains on its own), and
restarts a child that died unexpectedly, loudly, with a backoff; a child that keeps
dying right after start is not restarted in a tight loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import subprocess
import sys
import time
from typing import Awaitable, Callable, Sequence

from ..logs import event
from .worker import Worker

__all__ = ["run_worker", "supervise"]

INFO, WARNING, ERROR = logging.INFO, logging.WARNING, logging.ERROR


def event_loop_runner() -> asyncio.Runner:
    """uvloop when installed (the `fast` extra): it roughly halves the loop's overhead."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run_worker(make_worker: Callable[[], Worker], close: Callable[[], Awaitable[None]]) -> None:
    """Run one worker in this process until SIGTERM/SIGINT (a second signal: no grace);
    then `close` what it used (the App's connections and resources)."""

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

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            await worker.run()
        finally:
            await close()

    # Everything imported so far (the app, pydantic models, the openai SDK: about a million
    # objects) lives as long as the process; frozen, the collector stops re-walking it on
    # every full collection, which otherwise costs a worker a good part of its time.
    gc.freeze()
    with event_loop_runner() as runner:
        runner.run(main())


def supervise(argv_for_child: Sequence[str], processes: int, restart: bool = True) -> int:
    """Start `processes` children running `argv_for_child`; return when all have exited."""
    children: dict[int, subprocess.Popen[bytes]] = {}
    started: dict[int, float] = {}
    stopping = {"flag": False}

    def spawn(slot: int) -> None:
        children[slot] = subprocess.Popen([sys.executable, "-m", "runwright", *argv_for_child])
        started[slot] = time.monotonic()
        event(INFO, "worker process started", slot=slot, pid=children[slot].pid)

    def forward(signum: int, _frame: object) -> None:
        stopping["flag"] = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for slot in range(1, processes + 1):
        spawn(slot)
    worst = 0
    while children:
        time.sleep(0.2)
        for slot, child in list(children.items()):
            code = child.poll()
            if code is None:
                continue
            del children[slot]
            if stopping["flag"] or not restart:
                worst = worst or code
                continue
            event(ERROR, "worker process died; restarting it", slot=slot, pid=child.pid, exit_code=code)
            if time.monotonic() - started[slot] < 5:
                time.sleep(2)  # it died young: do not spin
            spawn(slot)
    return worst
