"""Threads over HTTP (and the CLI): cancel every open run, follow the whole thread as SSE."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from ..process.harness import ROOT
from .test_api import as_, server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.process
DEADLINE_S = 30


async def sse_events(http: httpx.AsyncClient, path: str, headers: dict[str, str], count: int) -> list[dict]:
    """The first `count` events of an SSE stream, with their ids."""
    out: list[dict] = []
    async with asyncio.timeout(DEADLINE_S), http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200
        event: dict = {}
        async for line in response.aiter_lines():
            if line.startswith("id: "):  # <incarnation>:<tseq>
                incarnation, _, tseq = line[4:].rpartition(":")
                event["id"], event["incarnation"] = int(tseq), int(incarnation)
            elif line.startswith("event: "):
                event["event"] = line[7:]
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
            elif not line and event:
                out.append(event)
                event = {}
                if len(out) == count:
                    return out
    return out


async def test_a_thread_is_followed_and_cancelled_over_http(server: str, store_url: str) -> None:  # noqa: F811
    alice = as_("alice-token")
    async with httpx.AsyncClient(base_url=server, timeout=DEADLINE_S) as http:
        ids = []
        for n in range(3):
            made = await http.post("/runs", headers=alice, json={
                "task": "record", "args": {"n": n}, "thread": "t", "on_busy": "enqueue"})
            assert made.status_code == 201
            ids.append(made.json()["id"])
        page = (await http.get("/threads/t/events", headers=alice)).json()
        assert [(e["tseq"], e["run_id"], e["kind"]) for e in page["items"]] == [
            (1, ids[0], "submitted"), (2, ids[1], "submitted"), (3, ids[2], "submitted")]
        assert (await http.get("/threads/t/events", headers=as_("bob-token"))).status_code == 404  # his: none

        first = await sse_events(http, "/threads/t/events/stream", alice, 2)
        assert [e["id"] for e in first] == [1, 2]
        resumed = await sse_events(http, "/threads/t/events/stream", {**alice, "Last-Event-ID": "2"}, 1)
        assert [(e["id"], e["data"]["run_id"]) for e in resumed] == [(3, ids[2])]

        # Connected before or after the cancel lands, a stream resumed at 3 gives 4, 5, 6.
        live = asyncio.create_task(sse_events(http, "/threads/t/events/stream",
                                              {**alice, "Last-Event-ID": "3"}, 3))
        cancelled = await http.post("/threads/t/cancel", headers=alice)
        assert cancelled.status_code == 200
        assert sorted(r["id"] for r in cancelled.json()["items"]) == ids
        assert {r["state"] for r in cancelled.json()["items"]} == {"cancelled"}
        streamed = await live
        assert [e["id"] for e in streamed] == [4, 5, 6]
        assert {(e["data"]["run_id"], e["data"]["kind"]) for e in streamed} == {(i, "cancelled") for i in ids}

        again = await http.post("/runs", headers=alice, json={
            "task": "record", "args": {"n": 9}, "thread": "t", "on_busy": "reject"})
        assert again.status_code == 201  # cancelled, not deleted: the thread takes runs

    cli = subprocess.run([sys.executable, "-m", "runwright", "thread", "cancel", "t", "--tenant", "alice",
                          "--url", store_url], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S)
    assert cli.returncode == 0, cli.stderr
    assert f"run {again.json()['id']}: cancelled" in cli.stdout
    assert "thread 't': 1 open run(s) cancelled" in cli.stdout
