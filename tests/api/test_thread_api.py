"""Threads over HTTP (and the CLI): cancel every open run, follow the whole thread as SSE."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from ..process.harness import ROOT
from .test_api import OPERATOR_TOKEN, as_, server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.process
DEADLINE_S = 30


async def sse_events(http: httpx.AsyncClient, path: str, headers: dict[str, str], count: int) -> list[dict]:
    """The first `count` events of an SSE stream, with their ids."""
    out: list[dict] = []
    async with asyncio.timeout(DEADLINE_S), http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200
        event: dict = {}
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                event["id"] = int(line[4:])
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


async def test_threads_are_listed_newest_first_in_pages_each_tenant_its_own(server: str) -> None:  # noqa: F811
    alice, bob, operator = as_("alice-token"), as_("bob-token"), as_(OPERATOR_TOKEN)
    async with httpx.AsyncClient(base_url=server, timeout=DEADLINE_S) as http:
        for who, thread in [(alice, "a1"), (bob, "b1"), (alice, "a2"), (alice, "a3"), (alice, "gone")]:
            made = await http.post("/runs", headers=who, json={
                "task": "record", "args": {"n": 1}, "thread": thread, "delay_s": 3600})
            assert made.status_code == 201, made.text
        assert (await http.delete("/threads/gone", headers=alice)).status_code == 204

        async def pages(headers: dict[str, str], **params: object) -> list[list[dict]]:
            out, after = [], None
            while True:
                query = {**params, "limit": 2, **({"after": after} if after else {})}
                answer = await http.get("/threads", headers=headers, params=query)
                assert answer.status_code == 200, answer.text
                out.append(answer.json()["items"])
                after = answer.json()["next_cursor"]
                if after is None:
                    return out

        assert [[t["thread"] for t in page] for page in await pages(alice)] == [["a3", "a2"], ["a1"]]
        assert [[t["thread"] for t in page] for page in await pages(bob)] == [["b1"]]
        everyone = [(t["tenant"], t["thread"]) for page in await pages(operator) for t in page]
        assert everyone == [("alice", "a3"), ("alice", "a2"), ("bob", "b1"), ("alice", "a1")]
        (a3, *_), *_ = await pages(alice)
        assert (a3["runs"], a3["open_runs"], a3["busy"], a3["last_run_state"], a3["deleted"]) == (
            1, 1, True, "queued", False)
        deleted = (await http.get("/threads", headers=alice, params={"include_deleted": True})).json()
        assert [(t["thread"], t["deleted"]) for t in deleted["items"]][0] == ("gone", True)
        assert deleted["items"][0]["last_run_state"] == "cancelled" and deleted["next_cursor"] is None
        narrowed = (await http.get("/threads", headers=operator, params={"tenant": "bob"})).json()
        assert [t["thread"] for t in narrowed["items"]] == ["b1"]
        refused = await http.get("/threads", headers=alice, params={"tenant": "bob"})
        assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
        # The operator cancels a tenant's thread by naming the tenant, as the dashboard does;
        # a tenant naming another is refused.
        for path in ("/threads/a3/cancel", "/threads/a3/events/stream"):
            method = "POST" if path.endswith("cancel") else "GET"
            other = await http.request(method, path, headers=bob, params={"tenant": "alice"})
            assert other.status_code == 403, (path, other.text)
        cancelled = await http.post("/threads/a3/cancel", headers=operator, params={"tenant": "alice"})
        assert [r["state"] for r in cancelled.json()["items"]] == ["cancelled"]
        (a3, *_), *_ = await pages(alice)
        assert (a3["thread"], a3["busy"]) == ("a3", False)
