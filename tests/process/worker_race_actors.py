"""Actors of the dead-worker races, each a process of its own on the store (run as
`python -m tests.process.worker_race_actors ROLE URL GO STOP ARG`): each says it is ready
(a file GO.ready.<pid>), then waits until the file GO exists, so that all of them start
together, then acts until the file STOP exists (a registrar: until it went through its
runs). Each prints one JSON line of what it saw; one that raises ends with its traceback.

    sweep URL GO STOP -        unrunnable sweeps (runs due a millisecond), one after another
    register URL GO STOP FILE  for each "task:run_id:due_at" of FILE (comma-separated, read
                               at GO, written by the test once every actor was ready), in
                               turn, about when the run is due: register a worker serving
                               only that task, read the run, and
                               when it was still queued, claim it with that worker (which
                               must get it: a sweep that had not committed before the
                               registration saw the worker), finish it and deregister
    rescue URL GO STOP STALE   rescues, one after another (worker_stale_s STALE)
    flap URL GO STOP N         N registered workers, each in a loop: its liveness mark goes
                               missing for about the rescuers' grace, then it takes it again
                               (as a worker whose connection was cut and came back); when
                               its registration was still there, it holds its mark a moment
                               and its registration must still be there after (a rescuer
                               that judged it dead before it came back must not delete it)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from typing import Any

from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._liveness import MISSING_GRACE_S
from runwright.store._params import (
    RunClaimParams,
    RunFinishParams,
    RunRescueParams,
    RunUnrunnableParams,
    WorkerHeartbeatParams,
    WorkerRegisterParams,
)

from .race_actors import _until_exists  # the one start signal every race actor waits on

QUEUE = "racing"


async def sweep(store: Any, go: str, stop: str, _arg: str) -> dict[str, Any]:
    await _until_exists(go)
    passes = closed = 0
    while not os.path.exists(stop):
        closed += len(await store.run_fail_unrunnable_many(RunUnrunnableParams(due_for_s=0.001)))
        passes += 1
    return {"passes": passes, "closed": closed}


async def register(store: Any, go: str, _stop: str, pairs_file: str) -> dict[str, Any]:
    await _until_exists(go)
    with open(pairs_file) as f:
        pairs = f.read().strip()
    seen: list[dict[str, Any]] = []
    for pair in pairs.split(","):
        task, run_id, due_at = pair.rsplit(":", 2)
        # About when the run becomes the sweeps' to close: the registration meets them.
        await asyncio.sleep(max(0.0, float(due_at) + random.uniform(-0.03, 0.01) - time.time()))
        wid = await store.worker_register(WorkerRegisterParams("race", os.getpid(), [QUEUE], [task]))
        run = await store.run_get(int(run_id))
        entry: dict[str, Any] = {"run": int(run_id), "seen": run.state.value, "claimed": None}
        if run.state is RunState.QUEUED:
            # It may not be due yet: claimed once due, unless a sweep closed it meanwhile.
            while not (claimed := await store.run_claim(RunClaimParams(wid, [QUEUE], [task], 1, 60.0))):
                if (await store.run_get(int(run_id))).state is not RunState.QUEUED:
                    break
                await asyncio.sleep(0.005)
            entry["claimed"] = [r.id for r in claimed]
            for r in claimed:
                await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.SUCCEEDED, result="1")])
        await store.worker_deregister(wid)
        seen.append(entry)
    return {"seen": seen}


async def rescue(store: Any, go: str, stop: str, stale_s: str) -> dict[str, Any]:
    await _until_exists(go)
    passes = 0
    while not os.path.exists(stop):
        await store.run_rescue_many(RunRescueParams(worker_stale_s=float(stale_s)))
        passes += 1
    return {"passes": passes}


class _Marks:
    """A worker's liveness mark dropped and taken again, by backend (the store's own
    means: its session lock, its liveness key, its heartbeat)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.kind = type(store).__name__

    async def drop(self, wid: int) -> None:
        if self.kind == "PostgresStore":
            # The mark is on the process's own session, which the store's LISTENs and
            # presence share: a statement of ours takes its turn there, as the store's do.
            conn = self.store._marks.connection(wid)
            async with self.store._own.use(conn):
                await conn.fetchval("SELECT pg_advisory_unlock($1, $2)", self.store.lock_namespace, wid)
        elif self.kind == "RedisStore":
            self.store._keeper.discard(wid)  # its key lapses: as a worker cut off
            await self.store.redis.delete(self.store.key(f"alive:{wid}"))
        # SQLite: its heartbeat stops (the rescuers' worker_stale_s is short)

    async def retake(self, wid: int) -> bool:
        """Take the mark again; True when the registration was still there."""
        if self.kind == "PostgresStore":  # as _marks.py: the lock first, then the row
            conn = self.store._marks.connection(wid)
            while True:
                async with self.store._own.use(conn):
                    if await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)",
                                           self.store.lock_namespace, wid):
                        break
                await asyncio.sleep(0.01)
            return await self.registered(wid)
        back = await self.store.worker_heartbeat(WorkerHeartbeatParams(wid))
        if back and self.kind == "RedisStore":
            self.store._keeper.add(wid)
        return bool(back)

    async def keep(self, wid: int) -> None:
        if self.kind == "SqliteStore":
            await self.store.worker_heartbeat(WorkerHeartbeatParams(wid))

    async def registered(self, wid: int) -> bool:
        return wid in {w.id for w in await self.store.worker_list()}


FLAPPER = WorkerRegisterParams("race", os.getpid(), [QUEUE], ["flap"])


async def flap(store: Any, go: str, stop: str, count: str) -> dict[str, Any]:
    marks = _Marks(store)
    found = {"back": 0, "declared_dead": 0, "lost_while_held": []}

    async def one() -> None:
        wid = await store.worker_register(FLAPPER)
        while not os.path.exists(stop):
            await marks.drop(wid)
            await asyncio.sleep(random.uniform(0.6, 1.6) * MISSING_GRACE_S)
            if not await marks.retake(wid):
                found["declared_dead"] += 1
                await store.worker_deregister(wid)
                wid = await store.worker_register(FLAPPER)
                continue
            found["back"] += 1
            for _ in range(3):  # held: no rescuer may take it for dead now
                await asyncio.sleep(0.03)
                await marks.keep(wid)
            if not await marks.registered(wid):
                found["lost_while_held"].append(wid)
                wid = await store.worker_register(FLAPPER)
        await store.worker_deregister(wid)

    await _until_exists(go)
    await asyncio.gather(*(one() for _ in range(int(count))))
    return found


ROLES = {"sweep": sweep, "register": register, "rescue": rescue, "flap": flap}


async def _main(role: str, url: str, go: str, stop: str, arg: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    try:
        out = await ROLES[role](store, go, stop, arg)
    finally:
        await store.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:]))
