"""What the dashboard reads and does over HTTP, on every backend: the session cookie,
the chart series, a run's attempts, journal and children, bulk retry of dead letters,
and the key and tenant filters; each one kept to the caller's own runs."""

from __future__ import annotations

import httpx
import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..process import apps
from .test_api import OPERATOR_TOKEN, as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process
PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["detail"]
    return body


async def test_a_session_cookie_signs_in_once_and_guards_writes(server: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server) as http:
        problem(await http.post("/session", json={"token": "wrong"}), 401)
        problem(await http.post("/session", json={"token": "ünïcode"}), 401)
        problem(await http.post("/session", json={"token": "alice-token", "extra": 1}), 422)
        problem(await http.get("/session"), 401)
        signed = await http.post("/session", json={"token": "alice-token"})
        assert signed.status_code == 200
        alice = {"tenant": "alice", "operator": False, "auth": True, "operator_decode": False}
        assert signed.json() == alice
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert (await http.get("/session")).json() == alice
        assert (await http.get("/runs")).status_code == 200
        # A write the cookie alone authenticates could be another site's forged form.
        body = {"task": "record", "args": {"n": 1}}
        problem(await http.post("/runs", json=body), 403)
        made = await http.post("/runs", json=body, headers={"X-Requested-With": "runwright"})
        assert made.status_code == 201 and made.json()["tenant"] == "alice"
        # A bearer header still wins over the cookie: bob sees nothing of alice's.
        assert (await http.get(f"/runs/{made.json()['id']}", headers=as_("bob-token"))).status_code == 404
        out = await http.delete("/session")
        assert out.status_code == 204 and "max-age=0" in out.headers["set-cookie"].lower()
        problem(await http.get("/runs"), 401)
        operator = await http.post("/session", json={"token": OPERATOR_TOKEN})
        assert operator.json() == {"tenant": None, "operator": True, "auth": True, "operator_decode": False}


async def test_the_dashboards_assets_are_served_without_a_token(server: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server) as http:
        page = await http.get("/")
        assert page.status_code == 200 and 'src="/static/vendor/uPlot.iife.min.js"' in page.text
        # An empty icon of its own: a browser asks for no /favicon.ico (a 404 in its console).
        assert '<link rel="icon" href="data:,">' in page.text
        for path in ("/static/core.js", "/static/dashboard.css", "/static/vendor/uPlot.iife.min.js",
                     "/static/vendor/uPlot.min.css", "/static/vendor/uPlot.LICENSE"):
            assert (await http.get(path)).status_code == 200, path
        problem(await http.get("/static/missing.js"), 404)


async def test_series_count_each_callers_ended_runs_and_queue_depth(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    handles = [await worker_app.submit(apps.record, n=i, tenant=t)
               for i, t in enumerate(["alice", "alice", "bob"])]
    async with running_worker(worker_app):
        for handle in handles:
            await handle.result(timeout_s=30)
    await worker_app.submit(apps.record, n=9, tenant="bob")  # due, waiting: bob's depth
    async with httpx.AsyncClient(base_url=server) as http:
        seen = {}
        for token in ("alice-token", "bob-token", OPERATOR_TOKEN):
            answer = await http.get("/metrics/series", params={"window_s": 600, "step_s": 60},
                                    headers=as_(token))
            assert answer.status_code == 200, answer.text
            seen[token] = answer.json()
        alice, bob, operator = seen.values()
        assert [sum(s["ended"]) for s in (alice, bob, operator)] == [2, 1, 3]
        assert len(alice["t"]) == len(alice["ended"]) == 10 and alice["step_s"] == 60
        assert alice["t"][0] <= alice["now"] - 600 + 60 and alice["t"][-1] <= alice["now"]
        (bucket,) = [i for i, n in enumerate(operator["ended"]) if n]
        assert operator["throughput_per_min"][bucket] == 3
        for name in ("submit_to_start_s", "run_duration_s"):
            p50, p99 = operator[name]["p50"][bucket], operator[name]["p99"][bucket]
            assert p50 is not None and 0 <= p50 <= p99
            assert operator[name]["p50"][bucket - 1 if bucket else bucket + 1] is None  # no run ended
        assert [s["queue_depth"]["now"] for s in (alice, bob, operator)] == [0, 1, 1]
        assert bob["queue_depth"]["depth"][-1] == 1 and bob["queue_depth"]["by_queue"] == {"default": 1}
        problem(await http.get("/metrics/series", params={"window_s": 86400, "step_s": 5},
                               headers=as_("alice-token")), 422)
        problem(await http.get("/metrics/series", params={"step_s": 1}, headers=as_("alice-token")), 422)
        problem(await http.get("/metrics/series"), 401)


async def test_a_runs_attempts_steps_and_children_are_its_tenants(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app):
        parent = await worker_app.submit(apps.fan_out, count=2, hold_n=-1, tenant="alice")
        doomed = await worker_app.submit(apps.doomed, tenant="alice")
        await parent.result(timeout_s=60)
        with pytest.raises(rw.RunFailed):
            await doomed.result(timeout_s=60)
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        steps = (await http.get(f"/runs/{parent.id}/steps")).json()
        assert [s["name"] for s in steps] == ["submit:child", "submit:child"]
        assert all(s["status"] == "done" and s["recorded_at"] > 0 for s in steps)
        children = (await http.get(f"/runs/{parent.id}/children")).json()["items"]
        assert [c["id"] for c in children] == [s["child_id"] for s in steps]
        assert all(c["parent_id"] == parent.id and c["state"] == "succeeded" for c in children)
        outcomes = [a["outcome"] for a in (await http.get(f"/runs/{parent.id}/attempts")).json()]
        assert outcomes[0] == "parked" and outcomes[-1] == "succeeded"
        attempts = (await http.get(f"/runs/{doomed.id}/attempts")).json()
        assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "retrying"), (2, "dead")]
        assert all(a["worker"] is not None and a["ended_at"] >= a["started_at"] for a in attempts)
        assert (await http.get(f"/runs/{doomed.id}/steps")).json() == []
        for path in ("steps", "children", "attempts"):
            problem(await http.get(f"/runs/{parent.id}/{path}", headers=as_("bob-token")), 404)
            problem(await http.get(f"/runs/987654/{path}"), 404)
            operator = await http.get(f"/runs/{parent.id}/{path}", headers=as_(OPERATOR_TOKEN))
            assert operator.status_code == 200


async def test_dead_letters_are_retried_in_bulk_among_the_callers_own(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app):
        ours = [await worker_app.submit(apps.doomed, tenant="alice") for _ in range(2)]
        theirs = await worker_app.submit(apps.doomed, tenant="bob")
        for handle in [*ours, theirs]:
            with pytest.raises(rw.RunFailed):
                await handle.result(timeout_s=60)
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        answer = await http.post("/dead/retry", json={"ids": [ours[0].id, theirs.id, ours[1].id, 987654]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert sorted(r["id"] for r in body["retried"]) == sorted(h.id for h in ours)
        assert all(r["state"] == "queued" for r in body["retried"])
        assert {r["id"] for r in body["refused"]} == {theirs.id, 987654}
        assert all("not found" in r["reason"] for r in body["refused"])  # bob's run is not named as his
        again = (await http.post("/dead/retry", json={"ids": [ours[0].id]})).json()
        assert again["retried"] == [] and again["refused"][0]["id"] == ours[0].id
        problem(await http.post("/dead/retry", json={"ids": []}), 422)
        problem(await http.post("/dead/retry", json={"ids": list(range(1, 502))}), 422)
    assert (await theirs.refresh()).state is rw.RunState.DEAD


async def test_runs_are_found_by_key_and_by_tenant_for_the_operator(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    alice = await worker_app.submit(apps.record, n=1, key="order-1", tenant="alice", thread="chat")
    bob = await worker_app.submit(apps.record, n=2, key="order-1", tenant="bob")
    await worker_app.submit(apps.record, n=3, key="order-10", tenant="alice")
    async with httpx.AsyncClient(base_url=server) as http:
        found = (await http.get("/runs", params={"key": "order-1"}, headers=as_("alice-token"))).json()
        assert [r["id"] for r in found["items"]] == [alice.id]
        everyone = (await http.get("/runs", params={"key": "order-1"}, headers=as_(OPERATOR_TOKEN))).json()
        assert [r["id"] for r in everyone["items"]] == [bob.id, alice.id]
        one = (await http.get("/runs", params={"tenant": "bob"}, headers=as_(OPERATOR_TOKEN))).json()
        assert [r["id"] for r in one["items"]] == [bob.id]
        own = (await http.get("/runs", params={"tenant": "alice"}, headers=as_("alice-token"))).json()
        assert len(own["items"]) == 2
        refused = problem(await http.get("/runs", params={"tenant": "bob"}, headers=as_("alice-token")), 403)
        assert refused["detail"] == ("the runs of tenant 'bob' are not yours: the tenant filter is "
                                     "the operator's")
        problem(await http.get("/runs", params={"tenant": ""}, headers=as_(OPERATOR_TOKEN)), 422)
        # The operator reads a tenant's thread by naming the tenant; a tenant only its own.
        runs = await http.get("/threads/chat/runs", params={"tenant": "alice"}, headers=as_(OPERATOR_TOKEN))
        assert [r["id"] for r in runs.json()["items"]] == [alice.id]
        events = await http.get("/threads/chat/events", params={"tenant": "alice"},
                                headers=as_(OPERATOR_TOKEN))
        assert events.json()["items"][0]["run_id"] == alice.id
        problem(await http.get("/threads/chat/events", headers=as_(OPERATOR_TOKEN)), 404)  # no tenant's
        problem(await http.get("/threads/chat/messages", params={"tenant": "alice"},
                               headers=as_("bob-token")), 403)


async def test_runs_are_found_by_the_text_of_their_error_among_the_callers_own(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app):
        ours = await worker_app.submit(apps.doomed, tenant="alice")
        theirs = await worker_app.submit(apps.doomed, tenant="bob")
        fine = await worker_app.submit(apps.record, n=1, tenant="alice")
        for handle in (ours, theirs):
            with pytest.raises(rw.RunFailed):
                await handle.result(timeout_s=60)
        await fine.result(timeout_s=60)
    async with httpx.AsyncClient(base_url=server) as http:
        async def found(token: str, **params: str) -> list[int]:
            answer = await http.get("/runs", params=params, headers=as_(token))
            assert answer.status_code == 200, answer.text
            return [r["id"] for r in answer.json()["items"]]

        assert await found("alice-token", error="RuntimeError: DOOMED") == [ours.id]  # never bob's
        assert await found("alice-token", error="doomed", state="dead") == [ours.id]
        assert await found("alice-token", error="doomed", state="queued") == []
        assert await found(OPERATOR_TOKEN, error="doomed") == [theirs.id, ours.id]
        assert await found(OPERATOR_TOKEN, error="doomed", tenant="bob") == [theirs.id]
        assert await found("alice-token", error="100%_") == []  # wildcards are themselves
        problem(await http.get("/runs", params={"error": "x" * 201}, headers=as_("alice-token")), 422)
        problem(await http.get("/runs", params={"error": "a\x00b"}, headers=as_("alice-token")), 422)
        problem(await http.get("/runs", params={"error": ""}, headers=as_("alice-token")), 422)
