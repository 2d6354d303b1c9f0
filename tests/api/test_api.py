"""The HTTP service, run as a real `runwright serve` process on loopback, on every backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import AsyncIterator

import httpx
import pytest

import runwright as rw
from runwright.store._params import RunCountParams

from ..integration.conftest import running_worker
from ..ports import free_port
from ..process import apps
from ..process.harness import APP_SPEC, ROOT, client, wait_until

pytestmark = pytest.mark.process
TOKENS = {"alice-token": "alice", "bob-token": "bob"}
OPERATOR_TOKEN = "operator-token"


@pytest.fixture
async def server(store_url: str, tmp_path) -> AsyncIterator[str]:
    async with serving(store_url, tmp_path, TOKENS) as base:
        yield base


@asynccontextmanager
async def serving(store_url: str, tmp_path, tokens: dict[str, str], *, env: dict[str, str] | None = None,
                  args: tuple[str, ...] = ()) -> AsyncIterator[str]:
    """A `runwright serve` process with these tenant tokens (and the operator's), `env` added
    to its environment and `args` to its command line; its URL. Its log is
    `tmp_path/server-<port>.log`."""
    port = free_port()
    env = {**os.environ, "RUNWRIGHT_TOKENS": ",".join(f"{t}={n}" for t, n in tokens.items()),
           "RUNWRIGHT_OPERATOR_TOKENS": OPERATOR_TOKEN, apps.LEDGER_ENV: str(tmp_path), **(env or {})}
    async with client(store_url):  # the schema exists before the server starts
        pass
    log = open(tmp_path / f"server-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "runwright", "serve", APP_SPEC, "--port", str(port),
                             "--url", store_url, *args], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_until(lambda: _healthy(base), "the server answers /healthz")
        yield base
    finally:
        proc.kill()
        proc.wait()
        log.close()


async def _healthy(base: str) -> bool:
    try:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{base}/healthz")).status_code == 200
    except httpx.TransportError:
        return False


def as_(tenant_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant_token}"}


@pytest.fixture
async def worker_app(store_url: str, tmp_path, monkeypatch) -> AsyncIterator[rw.App]:
    monkeypatch.setenv(apps.LEDGER_ENV, str(tmp_path))
    async with client(store_url) as app:
        yield app


async def test_submit_follow_cancel_retry_and_list(server: str, worker_app: rw.App) -> None:
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        created = await http.post("/runs", json={"task": "record", "args": {"n": 7}, "key": "k1"})
        assert created.status_code == 201, created.text
        run = created.json()
        again = await http.post("/runs", json={"task": "record", "args": {"n": 7}, "key": "k1"})
        assert again.status_code == 200 and again.json()["id"] == run["id"]
        other = await http.post("/runs", json={"task": "record", "args": {"n": 8}, "key": "k1"})
        assert other.status_code == 409 and other.json()["title"] == "Key conflict"
        async with running_worker(worker_app):
            async with http.stream("GET", f"/runs/{run['id']}/events/stream") as stream:
                kinds = [json.loads(line[6:])["kind"] async for line in stream.aiter_lines()
                         if line.startswith("data: ")]
        assert kinds == ["submitted", "started", "succeeded"]
        done = (await http.get(f"/runs/{run['id']}")).json()
        assert done["state"] == "succeeded" and done["result"] == 7
        page = (await http.get(f"/runs/{run['id']}/events", params={"after": 1})).json()
        assert [e["seq"] for e in page["items"]] == [2, 3] and page["next_after"] == 3
        queued = (await http.post("/runs", json={"task": "record", "args": {"n": 1}, "delay_s": 3600})).json()
        cancelled = await http.post(f"/runs/{queued['id']}/cancel")
        assert cancelled.json()["state"] == "cancelled"
        refused = await http.post(f"/runs/{queued['id']}/retry")
        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/problem+json"
        listed = (await http.get("/runs", params={"state": "succeeded", "limit": 10})).json()
        assert [r["id"] for r in listed["items"]] == [run["id"]]
        window = {"created_after": run["created_at"], "created_before": run["created_at"] + 0.0001}
        assert [r["id"] for r in (await http.get("/runs", params=window)).json()["items"]] == [run["id"]]
        later = {"created_after": queued["created_at"] + 1}
        assert (await http.get("/runs", params=later)).json()["items"] == []
        assert len((await http.post("/threads")).json()["thread"]) == 32


async def test_a_run_is_paused_and_resumed_over_http(server: str, worker_app: rw.App) -> None:
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        later = (await http.post("/runs", json={"task": "record", "args": {"n": 1}, "delay_s": 3600})).json()
        paused = await http.post(f"/runs/{later['id']}/pause")
        assert paused.status_code == 200, paused.text
        assert paused.json()["state"] == "queued" and not paused.json()["pause_requested"]
        read = (await http.get(f"/runs/{later['id']}")).json()
        assert read["waiting"]["reason"] == "paused" and "resume" in read["waiting"]["detail"]
        listed = (await http.get("/runs", params={"waiting": "paused"})).json()["items"]
        assert [r["id"] for r in listed] == [later["id"]]
        assert (await http.post(f"/runs/{later['id']}/pause")).status_code == 200  # again: nothing changes
        resumed = (await http.post(f"/runs/{later['id']}/resume")).json()
        assert resumed["run_at"] == later["run_at"]  # never started: its submitted time holds
        refused = await http.post(f"/runs/{later['id']}/resume")
        assert refused.status_code == 409 and refused.headers["content-type"] == "application/problem+json"
        assert "not paused" in refused.json()["detail"]
        await http.post(f"/runs/{later['id']}/cancel")
        assert (await http.post(f"/runs/{later['id']}/pause")).status_code == 409
        held = (await http.post("/runs", json={"task": "record", "args": {"n": 2}, "delay_s": 3600})).json()
        await http.post(f"/runs/{held['id']}/pause")
        bulk = (await http.post("/bulk", json={"action": "resume"})).json()
        assert bulk["done"] == [held["id"]] and bulk["refused"] == {}
    async with httpx.AsyncClient(base_url=server, headers=as_("bob-token")) as http:
        assert (await http.post(f"/runs/{held['id']}/pause")).status_code == 404


async def test_the_operators_bulk_action_narrows_to_one_tenant_as_the_list_does(server: str) -> None:
    """POST /bulk's `tenant`, as GET /runs's: the operator acts over one tenant's runs alone
    (the dashboard's bulk panel sends the list's tenant filter); a tenant may name only itself."""
    ids: dict[str, list[int]] = {}
    for tenant in ("alice", "bob"):
        async with httpx.AsyncClient(base_url=server, headers=as_(f"{tenant}-token")) as http:
            later = {"task": "record", "delay_s": 3600, "queue": "narrowed"}
            ids[tenant] = [(await http.post("/runs", json={**later, "args": {"n": i}})).json()["id"]
                           for i in range(2)]
    async with httpx.AsyncClient(base_url=server, headers=as_(OPERATOR_TOKEN)) as http:
        body = {"action": "cancel", "queue": "narrowed", "tenant": "bob"}
        dry = (await http.post("/bulk", json={**body, "dry_run": True})).json()
        assert (dry["matched"], sorted(dry["sample"])) == (2, ids["bob"])
        done = (await http.post("/bulk", json=body)).json()
        assert sorted(done["done"]) == ids["bob"] and done["refused"] == {}
        bad = await http.post("/bulk", json={**body, "tenant": "a\u0000b"})
        assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
        listed = (await http.get("/runs", params={"queue": "narrowed"})).json()["items"]
        states = {r["id"]: r["state"] for r in listed}
    assert [states[i] for i in ids["alice"]] == ["queued", "queued"]
    assert [states[i] for i in ids["bob"]] == ["cancelled", "cancelled"]
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        other = await http.post("/bulk", json={"action": "cancel", "tenant": "bob", "dry_run": True})
        assert other.status_code == 403 and "not yours" in other.json()["detail"]
        own = (await http.post("/bulk", json={"action": "cancel", "queue": "narrowed", "tenant": "alice",
                                             "dry_run": True})).json()
        assert own["matched"] == 2
        # Progress as it goes, asked for: a line after each page of runs, then the report.
        ndjson = {"Accept": "application/x-ndjson"}
        refused = await http.post("/bulk", json={"action": "cancel", "tenant": "bob"}, headers=ndjson)
        assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
        async with http.stream("POST", "/bulk", json={"action": "cancel", "queue": "narrowed"},
                               headers=ndjson) as answer:
            assert answer.headers["content-type"].startswith("application/x-ndjson")
            lines = [json.loads(line) async for line in answer.aiter_lines() if line]
        assert lines[0] == {"acted": 2, "matched": 2}
        assert sorted(lines[1]["report"]["done"]) == ids["alice"] and len(lines) == 2


async def test_runs_say_why_they_wait_and_filter_by_it(server: str, worker_app: rw.App) -> None:
    """`waiting` on every run read (null once it is not queued), `?waiting=` filters, a tenant
    sees only its own, and a reason that is none is a 422 naming the field."""
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        later = (await http.post("/runs", json={"task": "record", "args": {"n": 1}, "delay_s": 3600})).json()
        stuck = (await http.post("/runs", json={"task": "record", "args": {"n": 2},
                                                "queue": "nowhere"})).json()
        assert later["waiting"] is None  # a submit's answer does not judge; a read does
        read = (await http.get(f"/runs/{later['id']}")).json()["waiting"]
        assert (read["reason"], read["until"]) == ("scheduled", later["run_at"])
        assert read["detail"].startswith("it is due at 20") and read["detail"].endswith("Z")
        scheduled = (await http.get("/runs", params={"waiting": "scheduled"})).json()["items"]
        assert [r["id"] for r in scheduled] == [later["id"]]
        (nobody,) = (await http.get("/runs", params={"waiting": "worker"})).json()["items"]
        assert nobody["id"] == stuck["id"] and nobody["waiting"]["reason"] == "worker"
        assert "queue 'nowhere'" in nobody["waiting"]["detail"]
        bad = await http.get("/runs", params={"waiting": "napping"})
        assert bad.status_code == 422 and "waiting" in bad.json()["detail"], bad.text
        await http.post(f"/runs/{later['id']}/cancel")
        assert (await http.get(f"/runs/{later['id']}")).json()["waiting"] is None
    async with httpx.AsyncClient(base_url=server, headers=as_("bob-token")) as http:
        assert (await http.get("/runs", params={"waiting": "worker"})).json()["items"] == []


async def test_sse_resumes_from_last_event_id(server: str, worker_app: rw.App) -> None:
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "record", "args": {"n": 1}})).json()
        async with running_worker(worker_app):
            await (await worker_app.get(run["id"])).result(timeout_s=30)
        headers = {"Last-Event-ID": "1"}
        async with http.stream("GET", f"/runs/{run['id']}/events/stream", headers=headers) as stream:
            ids = [int(line[4:]) async for line in stream.aiter_lines() if line.startswith("id: ")]
    assert ids == [2, 3]


async def test_a_tenant_never_sees_another_tenants_runs(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as http:
        body = {"task": "record", "args": {"n": 1}, "key": "shared", "delay_s": 60}
        mine = (await http.post("/runs", headers=as_("alice-token"), json=body)).json()
        for method, path in [("GET", f"/runs/{mine['id']}"), ("POST", f"/runs/{mine['id']}/cancel"),
                             ("POST", f"/runs/{mine['id']}/retry"), ("GET", f"/runs/{mine['id']}/events"),
                             ("GET", f"/runs/{mine['id']}/events/stream")]:
            answer = await http.request(method, path, headers=as_("bob-token"))
            assert answer.status_code == 404, (method, path, answer.text)  # not 403: ids not probed
        assert (await http.get("/runs", headers=as_("bob-token"))).json()["items"] == []
        assert (await http.get("/dead", headers=as_("bob-token"))).json()["items"] == []
        assert (await http.get("/summary", headers=as_("bob-token"))).json()["queued"] == 0
        # Threads are named within a tenant: bob's "t" is not alice's "t".
        await http.post("/runs", headers=as_("alice-token"),
                        json={"task": "record", "args": {"n": 3}, "thread": "t", "delay_s": 60})
        assert (await http.get("/threads/t/runs", headers=as_("bob-token"))).json()["items"] == []
        assert (await http.get("/threads/t/messages", headers=as_("bob-token"))).status_code == 404
        assert (await http.delete("/threads/t", headers=as_("bob-token"))).status_code == 404
        assert len((await http.get("/threads/t/runs", headers=as_("alice-token"))).json()["items"]) == 1
        theirs = await http.post("/runs", headers=as_("bob-token"),
                                 json={"task": "record", "args": {"n": 2}, "key": "shared"})
        assert theirs.status_code == 201 and theirs.json()["id"] != mine["id"]  # keys per tenant
        assert (await http.get("/runs")).status_code == 401
        assert (await http.get("/runs", headers=as_("nobody"))).status_code == 401
        assert (await http.get(f"/runs/{mine['id']}", headers=as_("alice-token"))).status_code == 200


async def test_bad_requests_are_problems_and_store_nothing(server: str, worker_app: rw.App) -> None:
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        for body, status, text in [({"task": "nope"}, 422, "unknown task 'nope'"),
                                   ({"task": "record", "args": {}}, 422, "missing a required argument"),
                                   ({"task": "record", "args": {"n": 1}, "priority": -1}, 422, "priority"),
                                   ({"task": "record", "oops": 1}, 422, "oops")]:
            answer = await http.post("/runs", json=body)
            assert answer.status_code == status, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert text in answer.json()["detail"]
        assert (await http.get("/runs/424242")).status_code == 404
        huge = await http.post("/runs", json={"task": "record", "args": {"n": 1, "x": "y" * (3 << 20)}})
        assert huge.status_code == 413
        assert (await http.get("/readyz")).json() == {"status": "ready"}
        spec = (await http.get("/openapi.json")).json()
        assert "/runs/{run_id}/events/stream" in spec["paths"]
    assert await worker_app.store.run_count_by_state(RunCountParams()) == {}


async def test_metrics_and_summary(server: str, worker_app: rw.App) -> None:
    from runwright.observe import _metrics as metrics

    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "record", "args": {"n": 1}})).json()
        before = metrics.FINISHED.value(("record", "succeeded"))
        async with running_worker(worker_app):
            await (await worker_app.get(run["id"])).result(timeout_s=30)
        await http.post("/runs", json={"task": "record", "args": {"n": 2}})
        scraped = (await http.get("/metrics", headers=as_(OPERATOR_TOKEN))).text
        summary = (await http.get("/summary")).json()
    assert 'runwright_runs{queue="default",state="succeeded"} 1.0' in scraped
    assert 'runwright_queue_depth{queue="default"} 1.0' in scraped
    assert "runwright_workers_alive 0.0" in scraped
    assert summary["succeeded"] == 1 and summary["queued"] == 1 and summary["queues"] == ["default"]
    assert summary["queue_depths"] == {"default": 1}
    async with httpx.AsyncClient(base_url=server, headers=as_("bob-token")) as http:
        theirs = (await http.get("/summary")).json()
    assert theirs["succeeded"] == 0 and theirs["queued"] == 0 and theirs["queues"] == []
    # The in-process worker counted its attempt (label values from fixed sets only).
    assert metrics.FINISHED.value(("record", "succeeded")) == before + 1


async def test_threads_schedules_and_workers(server: str, worker_app: rw.App) -> None:
    spec = worker_app.schedule_spec("hourly", cron="0 * * * *", task=apps.record, args={"n": 1}, tz="UTC",
                                    misfire="skip", catch_up_limit=10, queue=None, priority=None)
    await worker_app.save_schedule(spec)
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        first = (await http.post("/runs", json={"task": "record", "args": {"n": 1}, "thread": "t1"})).json()
        busy = await http.post("/runs", json={"task": "record", "args": {"n": 2}, "thread": "t1"})
        assert busy.status_code == 409 and busy.json()["title"] == "Thread busy"
        runs = (await http.get("/threads/t1/runs")).json()["items"]
        assert [r["id"] for r in runs] == [first["id"]]
        assert (await http.get("/threads/t1/runs", headers=as_("bob-token"))).json()["items"] == []
        assert (await http.delete("/threads/t1")).status_code == 204
        assert (await http.get("/threads/t1/messages")).status_code == 410
        operator = as_(OPERATOR_TOKEN)
        (hourly,) = (await http.get("/schedules", headers=operator)).json()
        assert hourly["name"] == "hourly" and not hourly["paused"]
        listed = await http.get("/schedules")  # the deployment's timetable, not alice's
        assert listed.status_code == 403 and "hourly" not in listed.text
        refused = await http.post("/schedules/hourly/pause")
        assert refused.status_code == 403 and "RUNWRIGHT_OPERATOR_TOKENS" in refused.json()["detail"]
        assert (await http.get("/schedules", headers=operator)).json()[0]["paused"] is False
        assert (await http.post("/schedules/hourly/pause", headers=operator)).status_code == 204
        assert (await http.get("/schedules", headers=operator)).json()[0]["paused"] is True
        assert (await http.post("/schedules/nope/resume", headers=operator)).status_code == 404
        assert (await http.post("/schedules/hourly/resume")).status_code == 403
        assert (await http.get("/workers")).json() == []


async def test_metrics_are_the_operators_and_their_labels_are_bounded(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as http:
        assert (await http.get("/metrics")).status_code == 401
        refused = await http.get("/metrics", headers=as_("alice-token"))
        assert refused.status_code == 403 and "RUNWRIGHT_OPERATOR_TOKENS" in refused.json()["detail"]
        assert "runwright_" not in refused.text  # no counts, not even alice's own
        for n, queue in enumerate(["tenant-made-1", "tenant-made-2", "default"]):
            created = await http.post("/runs", headers=as_("alice-token"), json={
                "task": "record", "args": {"n": n}, "queue": queue})
            assert created.status_code == 201, created.text
        scraped = (await http.get("/metrics", headers=as_(OPERATOR_TOKEN))).text
    # A queue no task, schedule or worker of the deployment names is counted as "other".
    assert "tenant-made" not in scraped
    assert 'runwright_runs{queue="other",state="queued"} 2.0' in scraped
    assert 'runwright_queue_depth{queue="other"} 2.0' in scraped
    assert 'runwright_runs{queue="default",state="queued"} 1.0' in scraped
