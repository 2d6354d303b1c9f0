"""A publisher of an event, a process of its own (run as `python -m
tests.process.event_actors URL GO NAME DATA ID`): it says it is ready (a file
GO.ready.<pid>), waits until the file GO exists, so that all publishers start together,
then publishes event NAME with DATA (JSON) under ID, and prints one JSON line: the
publish's result, or {"error": name}."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import runwright as rw

from . import apps

START_DEADLINE_S = 120.0  # only so that a lost start signal ends the actor


async def main(url: str, go: str, name: str, data: str, event_id: str) -> None:
    app = rw.App(url)
    app.tasks.update(apps.app.tasks)  # the tasks that start on the event
    await app.open()
    with open(f"{go}.ready.{os.getpid()}", "w"):
        pass
    deadline = time.monotonic() + START_DEADLINE_S
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("the start signal never came")
        await asyncio.sleep(0.005)
    try:
        published = await app.publish_event(name, json.loads(data), id=event_id)
        print(json.dumps(published.as_json()))
    except rw.RunwrightError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    finally:
        await app.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
