"""Actors of the retention races, each a process of its own on the store (run as
`python -m tests.process.race_actors ROLE URL GO STOP ARG`): each says it is ready (a
file GO.ready.<pid>), then waits until the file GO exists, so that all of them start
together, then acts until the file STOP exists (a retrier: until it retried its runs).

    retry URL GO STOP IDS   retry each run of IDS (comma-separated) once, in that order;
                            print one JSON line per run: {"id", "answer"}, where the answer
                            is "requeued" or the name of the error that refused it
    cancel URL GO STOP IDS  cancel each run of IDS (comma-separated) once, in that order;
                            print one JSON line per run: {"id", "answer"}, where the answer
                            is the run's state after the cancel or the name of the error
                            that refused it (a store error ends the process: exit 1)
    sweep URL GO STOP MODE  retention passes, one after another: MODE "cap" (each thread
                            keeps its newest run) or "age" (runs ended a millisecond ago);
                            print the number of passes and of runs removed as JSON; a
                            pass that raises ends the process with its traceback (exit 1)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from runwright.errors import RunEnded, RunwrightError
from runwright.store import store_from_url
from runwright.store._params import RunCancelParams, RunReclaimParams, RunRetryParams, ThreadRunReclaimParams

START_DEADLINE_S = 120.0  # only so that a lost start signal ends the actor


async def _until_exists(path: str) -> None:
    """Say this actor is ready (a file beside GO), then wait for GO."""
    with open(f"{path}.ready.{os.getpid()}", "w"):
        pass
    deadline = time.monotonic() + START_DEADLINE_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"no start signal at {path}")
        await asyncio.sleep(0.005)


async def retry(url: str, go: str, ids: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for run_id in (int(i) for i in ids.split(",")):
            try:
                run = await store.run_retry(RunRetryParams(run_id))
                answer = "requeued" if run.state.value == "queued" else f"state {run.state.value}"
            except RunwrightError as exc:  # reclaimed before the retry came: refused, fine
                answer = type(exc).__name__
            print(json.dumps({"id": run_id, "answer": answer}), flush=True)
    finally:
        await store.close()


async def cancel(url: str, go: str, ids: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for run_id in (int(i) for i in ids.split(",")):
            try:
                run = await store.run_cancel(RunCancelParams(run_id))
                answer = run.state.value
            except RunEnded as exc:  # another canceller's cancel ended it first: fine
                answer = type(exc).__name__
            print(json.dumps({"id": run_id, "answer": answer}), flush=True)
    finally:
        await store.close()


async def sweep(url: str, go: str, stop: str, mode: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    passes = removed = 0
    try:
        await _until_exists(go)
        while not os.path.exists(stop):
            if mode == "cap":
                got = await store.thread_run_reclaim(ThreadRunReclaimParams(keep=1, limit=10))
            else:
                got = await store.run_reclaim(RunReclaimParams(limit=2, max_age_s=0.001))
            passes, removed = passes + 1, removed + len(got.run_ids)
    finally:
        await store.close()
    print(json.dumps({"passes": passes, "removed": removed}), flush=True)


def main(argv: list[str]) -> None:
    role, url, go, stop, arg = argv
    if role == "retry":
        asyncio.run(retry(url, go, arg))
    elif role == "cancel":
        asyncio.run(cancel(url, go, arg))
    else:
        asyncio.run(sweep(url, go, stop, arg))


if __name__ == "__main__":
    main(sys.argv[1:])
