"""Threads over HTTP (and the CLI): cancel every open run, follow the whole thread as SSE."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..process import apps
from ..process.harness import ROOT
from .test_api import OPERATOR_TOKEN, as_, server, worker_app  # noqa: F401 (the fixtures)

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


def _sweep_tombstones(store_url: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "runwright", "sweep", "--tombstone-age-s", "0.001", "--json",
                           "--url", store_url], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def _until_deleted(http: httpx.AsyncClient, path: str, headers: dict[str, str],
                         connected: asyncio.Event) -> list[str]:
    """The kinds of a thread stream's events, up to its `thread_deleted` one."""
    kinds: list[str] = []
    async with asyncio.timeout(DEADLINE_S), http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200
        connected.set()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kinds.append(line[7:])
                if kinds[-1] == "thread_deleted":
                    return kinds
    return kinds


async def _status(http: httpx.AsyncClient, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """The status and media type of an answer, without reading its body (a stream that
    opened by mistake would never end)."""
    async with asyncio.timeout(DEADLINE_S), http.stream("GET", path, headers=headers) as response:
        return response.status_code, response.headers["content-type"].split(";")[0]


async def test_a_reader_of_a_deleted_thread_is_told_410_after_its_name_is_reused(
        server: str, store_url: str) -> None:  # noqa: F811
    alice = as_("alice-token")
    async with httpx.AsyncClient(base_url=server, timeout=DEADLINE_S) as http:
        first = (await http.post("/runs", headers=alice, json={"task": "record", "args": {"n": 1},
                                                               "thread": "r"})).json()["id"]
        info = (await http.get("/threads/r", headers=alice)).json()
        old = info["incarnation"]
        assert (info["thread"], info["tenant"]) == ("r", "alice") and old >= 1
        assert (await http.get("/threads/r", headers=as_("bob-token"))).status_code == 404
        page = (await http.get("/threads/r/events", headers=alice)).json()
        assert page["incarnation"] == old and [e["run_id"] for e in page["items"]] == [first]
        (streamed,) = await sse_events(http, "/threads/r/events/stream", alice, 1)
        assert (streamed["incarnation"], streamed["id"]) == (old, 1)

        connected = asyncio.Event()
        following = asyncio.create_task(_until_deleted(http, "/threads/r/events/stream", alice, connected))
        async with asyncio.timeout(DEADLINE_S):
            await connected.wait()
        assert (await http.delete("/threads/r", headers=alice)).status_code == 204
        kinds = await following
        assert kinds[-1] == "thread_deleted"
        assert (await http.get("/threads/r", headers=alice)).status_code == 410
        assert _sweep_tombstones(store_url)["tombstones"] == 1
        assert (await http.get("/threads/r", headers=alice)).status_code == 404, "by name: no thread now"
        assert (await http.get(f"/threads/r?incarnation={old}", headers=alice)).status_code == 410

        second = (await http.post("/runs", headers=alice, json={"task": "record", "args": {"n": 2},
                                                                "thread": "r"})).json()["id"]
        new = (await http.get("/threads/r", headers=alice)).json()["incarnation"]
        assert new > old
        for path in (f"/threads/r?incarnation={old}", f"/threads/r/messages?incarnation={old}",
                     f"/threads/r/events?incarnation={old}&after=1",
                     f"/threads/r/events/stream?incarnation={old}"):
            assert await _status(http, path, alice) == (410, "application/problem+json"), path
        assert await _status(http, "/threads/r/events/stream", {**alice, "Last-Event-ID": f"{old}:1"}) == (
            410, "application/problem+json"), "a reconnect of the old stream is not shown the new thread"
        page = (await http.get("/threads/r/events", headers=alice)).json()
        assert page["incarnation"] == new
        assert [(e["tseq"], e["run_id"]) for e in page["items"]] == [(1, second)]
        resuming = {**alice, "Last-Event-ID": f"{new}:0"}
        (streamed,) = await sse_events(http, "/threads/r/events/stream", resuming, 1)
        assert (streamed["incarnation"], streamed["id"], streamed["data"]["run_id"]) == (new, 1, second)


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


def _cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwright", *args, "--url", store_url], cwd=ROOT,
                          capture_output=True, text=True, timeout=DEADLINE_S)


def _gone(response: httpx.Response) -> str:
    """The detail of a 410 problem."""
    assert response.status_code == 410, response.text
    assert response.headers["content-type"].split(";")[0] == "application/problem+json"
    return response.json()["detail"]


async def test_a_deleted_threads_runs_are_not_the_new_threads_and_are_not_retried(
        server: str, store_url: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app):
        doomed = await worker_app.submit(apps.doomed, tenant="alice", thread="q")
        with pytest.raises(rw.RunFailed):
            await doomed.result(timeout_s=DEADLINE_S)
    async with httpx.AsyncClient(base_url=server, timeout=DEADLINE_S, headers=as_("alice-token")) as http:
        old = (await http.get("/threads/q")).json()["incarnation"]
        for path in ("/threads/q/runs", f"/threads/q/runs?incarnation={old}"):
            assert [r["id"] for r in (await http.get(path)).json()["items"]] == [doomed.id], path
        assert (await http.delete("/threads/q")).status_code == 204
        assert "deleted" in _gone(await http.post(f"/runs/{doomed.id}/retry"))
        bulk = (await http.post("/dead/retry", json={"ids": [doomed.id]})).json()
        assert bulk["retried"] == [] and [r["id"] for r in bulk["refused"]] == [doomed.id]
        assert "deleted" in bulk["refused"][0]["reason"]
        refused = _cli(store_url, "retry", str(doomed.id))
        assert refused.returncode == 5 and "ThreadDeleted" in refused.stderr, refused.stderr

        assert _sweep_tombstones(store_url)["tombstones"] == 1
        second = (await http.post("/runs", json={"task": "record", "args": {"n": 2}, "thread": "q"})).json()
        new = (await http.get("/threads/q")).json()["incarnation"]
        assert new > old
        for path in ("/threads/q/runs", f"/threads/q/runs?incarnation={new}", "/runs?thread=q"):
            assert [r["id"] for r in (await http.get(path)).json()["items"]] == [second["id"]], path
        _gone(await http.get(f"/threads/q/runs?incarnation={old}"))
        _gone(await http.post(f"/runs/{doomed.id}/retry"))
        assert (await http.get(f"/runs/{doomed.id}")).json()["state"] == "dead"
        assert [r["id"] for r in (await http.get("/threads/q/runs")).json()["items"]] == [second["id"]]
    shown = _cli(store_url, "thread", "show", "q", "--tenant", "alice", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [r["id"] for r in json.loads(shown.stdout)["runs"]] == [second["id"]]
    refused = _cli(store_url, "retry", str(doomed.id))
    assert refused.returncode == 5 and "ThreadDeleted" in refused.stderr, refused.stderr
