"""SSE across a takeover: a client that disconnects and resumes with Last-Event-ID misses
nothing while the run's worker is SIGKILLed and another takes the run over."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

import runwright as rw
from runwright.store._params import EventListParams

from ..process.conftest import fleet  # noqa: F401 (fixture)
from ..process.harness import WorkerFleet, owner_pid, wait_until
from .test_api import as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process


async def read_sse(http: httpx.AsyncClient, path: str, last_id: int | None,
                   stop_after: int | None = None) -> list[tuple[int, str]]:
    """(id, kind) of each event; stops after `stop_after` events (a disconnect) or at the end."""
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    got: list[tuple[int, str]] = []
    async with http.stream("GET", path, headers=headers, timeout=60) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                item = json.loads(line[6:])
                got.append((item["seq"], item["kind"]))
                if stop_after is not None and len(got) >= stop_after:
                    break
    return got


async def test_sse_resume_across_a_sigkill_takeover(server: str, worker_app: rw.App,  # noqa: F811
                                                    fleet: WorkerFleet) -> None:  # noqa: F811
    workers = [fleet.start(), fleet.start()]
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "narrated_steps",
                                              "args": {"steps": 5, "gates": [2]}})).json()
        path = f"/runs/{run['id']}/events/stream"
        first = await read_sse(http, path, None, stop_after=4)  # then the client goes away
        await wait_until(lambda: ("gate-2", run["id"]) in {(e, r) for e, r, _, _ in fleet.ledger_lines()},
                         "the run waits at step 2")
        owner = await owner_pid(worker_app, await worker_app.store.run_get(run["id"]))
        next(w for w in workers if w.pid == owner).signal(signal.SIGKILL)
        await wait_until(lambda: _fence_above(worker_app, run["id"], 1), "another worker took the run")
        fleet.open_gate(run["id"], 2)
        rest = await read_sse(http, path, first[-1][0])
    log = [(e.seq, e.kind) for e in await worker_app.store.event_list(EventListParams(run["id"]))]
    assert first + rest == log  # no gap, no repeat, in order, across the disconnect
    assert [kind for _, kind in log].count("recovered") == 1 and log[-1][1] == "succeeded"


async def _fence_above(app: rw.App, run_id: int, fence: int) -> bool:
    run = await app.store.run_get(run_id)
    return run.fence > fence
