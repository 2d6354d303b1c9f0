"""A sender of signals, a process of its own (run as `python -m tests.process.signal_sprayer
URL RUN_ID COUNT`): it sends COUNT signals "tick" to the run, payloads "<pid>-<i>", a
random pause of up to 200 ms before each (so that its sends land while the run's short
waits linger, time out, and lingers end), and prints one JSON line: {"sent": [seq, ...]}
or {"error": name}."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

import runwright as rw

PAUSE_S = 0.2


async def main(url: str, run_id: int, count: int) -> None:
    app = rw.App(url)
    await app.open()
    sent = []
    try:
        for i in range(count):
            await asyncio.sleep(random.uniform(0, PAUSE_S))
            signal = await app.signal(run_id, "tick", f"{os.getpid()}-{i}")
            sent.append(signal.seq)
        print(json.dumps({"sent": sent}))
    except rw.RunwrightError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    finally:
        await app.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
