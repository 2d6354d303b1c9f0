"""Following a run over SSE, on every backend: a stream ends only when the run has ended
and every event was sent (not at the first event that looks terminal), a follower that
joins far behind gets the whole backlog page after page, a quiet stream is kept alive,
and a client told `retry:` stops reconnecting once nothing is left (204)."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

import runwright as rw
from runwright.server import Auth, create_server
from runwright.store._params import EventListParams

from ..integration.conftest import running_worker
from ..ports import free_port
from ..process import apps
from ..process.harness import wait_until
from .test_api import as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process


async def read_stream(http: httpx.AsyncClient, run_id: int, after: int = 0,
                      seen: list[int] | None = None) -> list[tuple[int, str]]:
    """(seq, kind) of every event of the stream, to its end; each seq also into `seen`."""
    got: list[tuple[int, str]] = []
    async with http.stream("GET", f"/runs/{run_id}/events/stream", params={"after": after},
                           timeout=120) as stream:
        assert stream.status_code == 200, await stream.aread()
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                item = json.loads(line[6:])
                got.append((item["seq"], item["kind"]))
                if seen is not None:
                    seen.append(item["seq"])
    return got


async def logged(app: rw.App, run_id: int) -> list[tuple[int, str]]:
    return [(e.seq, e.kind) for e in await app.store.event_list(EventListParams(run_id, 0, 100_000))]


async def test_a_run_retried_after_dying_streams_to_its_real_end(server: str,  # noqa: F811
                                                                 worker_app: rw.App) -> None:  # noqa: F811
    """Dead once (after an automatic retry), retried by hand, dead again: a follower that
    joined before the retry gets every event through the second `dead`, not the first."""
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "doomed"})).json()
        async with running_worker(worker_app):
            with pytest.raises(rw.RunFailed):
                await (await worker_app.get(run["id"])).result(timeout_s=60)
        assert (await http.post(f"/runs/{run['id']}/retry")).json()["state"] == "queued"
        first_life = await logged(worker_app, run["id"])
        seen: list[int] = []
        follower = asyncio.create_task(read_stream(http, run["id"], seen=seen))
        # Past the first `dead` (and the retry's event) and still open: the run is queued.
        await wait_until(lambda: len(seen) == len(first_life), "the follower read the first life")
        async with running_worker(worker_app):
            with pytest.raises(rw.RunFailed):
                await (await worker_app.get(run["id"])).result(timeout_s=60)
            got = await asyncio.wait_for(follower, 60)
        replayed = await read_stream(http, run["id"])  # joining after it all, from the start
    log = await logged(worker_app, run["id"])
    assert [kind for _, kind in log].count("dead") == 2 and log[-1][1] == "dead"
    assert [kind for _, kind in log].count("retrying") == 2
    assert got == log and replayed == log


async def test_a_reconnect_after_the_end_learns_of_a_later_retry(server: str,  # noqa: F811
                                                                 worker_app: rw.App) -> None:  # noqa: F811
    """A follower that saw `dead` ends, and its reconnect is told so (204). Once the run
    is retried by hand, the same reconnect resumes: `retried` (from what, by whom) and the
    new attempt, to its end; `run.events(after=...)` gives the library's follower as much."""
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "doomed"})).json()
        async with running_worker(worker_app):
            with pytest.raises(rw.RunFailed):
                await (await worker_app.get(run["id"])).result(timeout_s=60)
        first_life = await read_stream(http, run["id"])
        dead_seq = first_life[-1][0]
        assert first_life[-1][1] == "dead"
        path, resume = f"/runs/{run['id']}/events/stream", {"Last-Event-ID": str(dead_seq)}
        assert (await http.get(path, headers=resume)).status_code == 204
        assert (await http.post(f"/runs/{run['id']}/retry")).json()["state"] == "queued"
        got: list[dict] = []

        async def reconnect() -> None:
            async with http.stream("GET", path, headers=resume, timeout=120) as stream:
                assert stream.status_code == 200
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        got.append(json.loads(line[6:]))

        follower = asyncio.create_task(reconnect())
        await wait_until(lambda: got, "the reconnect resumed")
        assert (got[0]["seq"], got[0]["kind"], got[0]["data"]) == (
            dead_seq + 1, "retried", {"previous": "dead", "by": "alice"})
        async with running_worker(worker_app):
            await asyncio.wait_for(follower, 60)
        handle = await worker_app.get(run["id"])
        library = [(e.seq, e.kind) async for e in handle.events(after=dead_seq)]
    log = await logged(worker_app, run["id"])
    assert [(e["seq"], e["kind"]) for e in got] == library == log[dead_seq:]
    assert log[-1][1] == "dead" and [kind for _, kind in log[dead_seq:]].count("started") == 2


async def test_a_follower_far_behind_gets_every_page_of_the_backlog(server: str,  # noqa: F811
                                                                    worker_app: rw.App) -> None:  # noqa: F811
    """1505 events logged while the run waits: A follows live from 1400, then B joins at
    0. Each gets every event once, in order, up to the run's end."""
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "chatter", "args": {"count": 1503}})).json()
        async with running_worker(worker_app):
            await logged_up_to(worker_app, run["id"], 1505)
            a_seen: list[int] = []
            a = asyncio.create_task(read_stream(http, run["id"], after=1400, seen=a_seen))
            await wait_until(lambda: len(a_seen) >= 5, "A follows")
            b = asyncio.create_task(read_stream(http, run["id"], after=0))
            apps.gate_file(apps.ledger_dir(), run["id"], 0).touch()
            got_a, got_b = await asyncio.wait_for(asyncio.gather(a, b), 120)
    log = await logged(worker_app, run["id"])
    assert len(log) == 1506 and log[-1][1] == "succeeded"
    assert got_b == log
    assert got_a == log[1400:]


async def test_a_stream_of_an_ended_run_read_to_its_end_answers_204(server: str,  # noqa: F811
                                                                    worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "record", "args": {"n": 1}})).json()
        async with running_worker(worker_app):
            await (await worker_app.get(run["id"])).result(timeout_s=30)
        assert [kind for _, kind in await read_stream(http, run["id"], after=1)] == ["started", "succeeded"]
        path = f"/runs/{run['id']}/events/stream"
        # What an EventSource sends when it reconnects after the last event: 204 stops it.
        assert (await http.get(path, headers={"Last-Event-ID": "3"})).status_code == 204
        assert (await http.get(path, params={"after": 3})).status_code == 204


async def test_a_quiet_stream_is_kept_alive_and_tells_the_client_when_to_reconnect(
        store_url: str) -> None:
    async with rw.App(store_url) as app, serving_in_process(app, ping_s=0.2) as base:
        @app.task
        async def later() -> None: ...

        handle = await app.submit(later, delay_s=3600)  # no worker: the stream stays quiet
        async with httpx.AsyncClient(base_url=base) as http:
            async with http.stream("GET", f"/runs/{handle.id}/events/stream", timeout=60) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                raw = b""
                async for chunk in stream.aiter_bytes():
                    raw += chunk
                    if raw.count(b": ping") >= 2:
                        break
    lines = raw.decode().split("\n")
    assert "\r" not in raw.decode()  # frames end "\n\n", as the dashboard reads them
    assert "retry: 3000" in lines
    assert any(line.startswith("data: ") and json.loads(line[6:])["kind"] == "submitted" for line in lines)


@asynccontextmanager
async def serving_in_process(app: rw.App, ping_s: float = 15.0,
                             configure: Callable[[FastAPI], None] | None = None) -> AsyncIterator[str]:
    """create_server(app) (auth off) under a real uvicorn on loopback, in this event loop,
    with what `configure` adds to it; its URL."""
    api = create_server(app, Auth(enabled=False), ping_s=ping_s)
    if configure is not None:
        configure(api)
    port = free_port()
    uvicorn_server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning",
                                                   lifespan="off"))
    task = asyncio.create_task(uvicorn_server.serve())
    try:
        await wait_until(lambda: uvicorn_server.started, "uvicorn listens")
        yield f"http://127.0.0.1:{port}"
    finally:
        uvicorn_server.should_exit = True
        await task


async def logged_up_to(app: rw.App, run_id: int, seq: int) -> None:
    async def reached() -> bool:
        return (await app.store.run_get(run_id)).last_seq >= seq

    await wait_until(reached, f"run {run_id} logged {seq} events")
