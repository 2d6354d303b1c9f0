"""Actors of the race between submitters of a flow control key and retention's removal of
its record (`python -m tests.process.flow_retention_actors ROLE URL GO STOP ARG`), each a
process of its own, started together as race_actors' are (GO.ready.<pid>, then GO):

    submit URL GO STOP N   submit N runs of a refusing singleton on key "o-1" (task
                           "kept-singleton"), a random moment of up to 3 ms apart; print one
                           JSON line per submission: {"id"} or {"refused": <the key's run>}
    end URL GO STOP -      until STOP exists: list the task's queued runs and cancel each
                           (the only actor that ends them: two queued at once would stay
                           until it looks); print {"most": the most queued seen at once,
                           "ended": n}
    sweep URL GO STOP -    flow_key_reclaim passes until STOP exists; print {"passes",
                           "removed"} (a pass that raises ends the process: exit 1)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

from runwright.errors import RunEnded, SingletonTaken
from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._params import FlowKeyReclaimParams, RunCancelParams, RunInsertParams, RunListParams

from .race_actors import _until_exists

TASK = "kept-singleton"


async def submit(url: str, go: str, n: str) -> None:
    from runwright.tasks._flow import FlowOf, Singleton
    from runwright.tasks._submission import fresh_key

    declared = FlowOf(TASK, Singleton(key="{args.order}"))
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for i in range(int(n)):
            args = {"order": "o-1", "by": os.getpid(), "i": i}
            params = RunInsertParams(key=fresh_key(), task=TASK, args=json.dumps(args), key_is_fresh=True,
                                     flow=declared.of(args, None))
            try:
                (run,) = await store.run_insert_many([params])
                print(json.dumps({"id": run.id}), flush=True)
            except SingletonTaken as exc:
                print(json.dumps({"refused": exc.run_id}), flush=True)
            await asyncio.sleep(random.uniform(0, 0.003))
    finally:
        await store.close()


async def end(url: str, go: str, stop: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    most = ended = 0
    try:
        await _until_exists(go)
        while not os.path.exists(stop):
            queued = await store.run_list(RunListParams(states=[RunState.QUEUED], task=TASK, limit=10))
            most = max(most, len(queued))
            for run in queued:
                try:
                    await store.run_cancel(RunCancelParams(run.id))
                    ended += 1
                except RunEnded:
                    pass
            await asyncio.sleep(0.001)
    finally:
        await store.close()
    print(json.dumps({"most": most, "ended": ended}), flush=True)


async def sweep(url: str, go: str, stop: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    passes = removed = 0
    try:
        await _until_exists(go)
        while not os.path.exists(stop):
            removed += await store.flow_key_reclaim(FlowKeyReclaimParams(limit=10))
            passes += 1
    finally:
        await store.close()
    print(json.dumps({"passes": passes, "removed": removed}), flush=True)


def main(argv: list[str]) -> None:
    role, url, go, stop, arg = argv
    if role == "submit":
        asyncio.run(submit(url, go, arg))
    elif role == "end":
        asyncio.run(end(url, go, stop))
    elif role == "sweep":
        asyncio.run(sweep(url, go, stop))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
