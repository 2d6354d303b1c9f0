"""A sender of signal-with-start, a process of its own (run as `python -m
tests.process.signal_actors URL GO KEY COUNT`): it says it is ready (a file GO.ready.<pid>),
waits until the file GO exists, so that all senders start together, then signals the run of
KEY (starting it if there is none) with its own pid as the payload, and prints one JSON
line: {"run_id", "seq", "existed"} or {"error": name}."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import runwright as rw

from . import apps

START_DEADLINE_S = 120.0  # only so that a lost start signal ends the actor


async def main(url: str, go: str, key: str, count: int) -> None:
    app = rw.App(url)
    app.tasks.update(apps.app.tasks)
    await app.open()
    with open(f"{go}.ready.{os.getpid()}", "w"):
        pass
    deadline = time.monotonic() + START_DEADLINE_S
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("the start signal never came")
        await asyncio.sleep(0.005)
    try:
        handle, signal = await app.signal_with_start(apps.gather_signals, "msg", os.getpid(), key=key,
                                                     args={"count": count})
        print(json.dumps({"run_id": handle.id, "seq": signal.seq, "existed": handle.existed}))
    except rw.RunwrightError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    finally:
        await app.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
