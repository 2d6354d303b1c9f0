"""Signals over HTTP and the CLI, on every backend: sent by the caller's identity, within
its tenant, delivered once; signal-with-start by key; bad input refused in one line."""

from __future__ import annotations

import json
import os

import httpx
import pytest

import runwright as rw
from runwright.runs import WaitReason

from ..integration.conftest import running_worker
from ..process import apps
from ..process.harness import wait_until
from .test_api import as_, server, worker_app  # noqa: F401 (fixtures)
from .test_questions_api import cli

pytestmark = pytest.mark.process


async def test_a_signal_over_http_wakes_its_run_within_its_tenant(server: str,  # noqa: F811
                                                                  worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "await_payment", "args": {"order": "o-9"}})).json()
        url = f"/runs/{run['id']}/signals"
        async with running_worker(worker_app):
            async def parked() -> bool:
                got = (await http.get(f"/runs/{run['id']}")).json()
                return got["state"] == "queued" and (got.get("waiting") or {}).get("reason") == "signal"

            await wait_until(parked, "the run parks on its wait")
            other = await http.post(url, headers=as_("bob-token"), json={"name": "payment", "payload": 1})
            assert other.status_code == 404, "another tenant's run is not found"
            for bad in ({"name": "no spaces"}, {"name": "payment", "extra": 1}, {"payload": 1}):
                refused = await http.post(url, json=bad)
                assert refused.status_code == 422
                assert refused.headers["content-type"] == "application/problem+json"
            sent = await http.post(url, json={"name": "payment", "payload": {"amount": 5}, "key": "p1",
                                              "by": "ana"})
            assert sent.status_code == 200, sent.text
            assert (sent.json()["seq"], sent.json()["sent_by"]) == (1, "alice:ana")
            again = await http.post(url, json={"name": "payment", "payload": {"amount": 5}, "key": "p1"})
            assert again.json()["seq"] == 1, "the same key keeps one signal"
            changed = await http.post(url, json={"name": "payment", "payload": {"amount": 6}, "key": "p1"})
            assert changed.status_code == 409
            result = await (await worker_app.get(run["id"])).result(timeout_s=30)
        assert result["payment"] == {"amount": 5}
        (listed,) = (await http.get(url)).json()
        assert listed["position"] is not None and listed["taken_at"] is not None
        assert (await http.get(url, params={"pending": "true"})).json() == []
        late = await http.post(url, json={"name": "payment"})
        assert late.status_code == 409 and "ended" in late.json()["detail"]


async def test_signal_with_start_over_http_starts_once_and_signals_each_time(server: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        body = {"task": "gather_signals", "args": {"count": 5}, "key": "conv",
                "signal": {"name": "msg", "payload": "hi"}}
        first = await http.post("/signal-with-start", json=body)
        assert first.status_code == 201, first.text
        second = await http.post("/signal-with-start", json={**body, "signal": {"name": "msg", "payload": 2}})
        assert second.status_code == 200
        assert second.json()["run"]["id"] == first.json()["run"]["id"]
        assert [first.json()["signal"]["seq"], second.json()["signal"]["seq"]] == [1, 2]
        other = await http.post("/signal-with-start", json={**body, "args": {"count": 6}})
        assert other.status_code == 409 and other.json()["title"] == "Key conflict"
        bobs = await http.post("/signal-with-start", json=body, headers=as_("bob-token"))
        assert bobs.status_code == 201 and bobs.json()["run"]["id"] != first.json()["run"]["id"]


async def test_the_cli_sends_and_lists_signals(store_url: str, worker_app: rw.App) -> None:  # noqa: F811
    handle = await worker_app.submit(apps.await_payment, order="o-2")
    async with running_worker(worker_app):
        await wait_until(lambda: _parked(worker_app, handle.id), "the run parks on its wait")
        for bad_args, why in [(["payment", "not json"], "not JSON"), (["no spaces"], "signal name"),
                              (["payment", "1", "--by", " "], "blank")]:
            refused = cli("signal", str(handle.id), *bad_args, url=store_url)
            assert refused.returncode == 2, refused
            assert why in refused.stderr and "Traceback" not in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        missing = cli("signal", "999999", "payment", url=store_url)
        assert missing.returncode == 5 and "not found" in missing.stderr
        sent = cli("signal", str(handle.id), "payment", '{"amount": 3}', "--by", "ops", url=store_url)
        assert sent.returncode == 0, sent.stderr
        assert f"signal 1 'payment' sent to run {handle.id} by ops" in sent.stdout
        expected = {"order": "o-2", "payment": {"amount": 3}, "pid": os.getpid()}
        assert await handle.result(timeout_s=30) == expected
    listed = cli("signals", str(handle.id), "--json", url=store_url)
    assert listed.returncode == 0, listed.stderr
    (signal,) = json.loads(listed.stdout)
    assert (signal["name"], signal["payload"], signal["sent_by"]) == ("payment", {"amount": 3}, "ops")
    late = cli("signal", str(handle.id), "payment", url=store_url)
    assert late.returncode == 2 and "RunEnded" in late.stderr


async def _parked(app: rw.App, run_id: int) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.waiting == WaitReason.SIGNAL


async def test_a_parked_runs_state_and_queries_are_read_without_its_worker(
        server: str, worker_app: rw.App, store_url: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "await_payment", "args": {"order": "o-5"}})).json()
        async with running_worker(worker_app):
            await wait_until(lambda: _parked(worker_app, run["id"]), "the run parks on its wait")
        # No worker runs now: the state and the queries are read from the store.
        assert (await http.get(f"/runs/{run['id']}/state")).json() == {"state": {"stage": "awaiting payment"}}
        asked = await http.post(f"/runs/{run['id']}/queries/stage", json={"args": {"shout": True}})
        assert asked.status_code == 200, asked.text
        assert asked.json() == {"result": {"order": "o-5", "stage": "AWAITING PAYMENT"}}
        for name, body, why in [("nope", {}, "has no query 'nope' (its queries: stage)"),
                                ("stage", {"args": {"loud": 1}}, "unexpected keyword")]:
            refused = await http.post(f"/runs/{run['id']}/queries/{name}", json=body)
            assert refused.status_code == 422 and why in refused.json()["detail"], refused.text
        other = await http.get(f"/runs/{run['id']}/state", headers=as_("bob-token"))
        assert other.status_code == 404
    tenant = worker_app.tenant("alice")
    assert await tenant.query(run["id"], "stage") == {"order": "o-5", "stage": "awaiting payment"}
    state = cli("query", str(run["id"]), url=store_url)
    assert state.returncode == 0 and json.loads(state.stdout) == {"stage": "awaiting payment"}
    answered = cli("query", str(run["id"]), "stage", '{"shout": true}', "--app", "tests.process.apps:app",
                   url=store_url)
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["stage"] == "AWAITING PAYMENT"
    no_app = cli("query", str(run["id"]), "stage", url=store_url)
    assert no_app.returncode == 2 and "--app" in no_app.stderr and len(no_app.stderr.splitlines()) == 1
    await worker_app.signal(run["id"], "payment", 1)
    async with running_worker(worker_app):
        await (await worker_app.get(run["id"])).result(timeout_s=30)
    assert await worker_app.state(run["id"]) == {"stage": "charging"}


async def test_the_cli_reports_a_patchs_runs(store_url: str, worker_app: rw.App) -> None:  # noqa: F811
    report = cli("patches", "lookup-v2", "--json", url=store_url)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout) == {"patch_id": "lookup-v2", "patched": [], "unpatched": [],
                                         "complete": True}
    shown = cli("patches", "lookup-v2", url=store_url)
    assert "0 live runs took the new path, 0 did not" in shown.stdout
    bad = cli("patches", "no spaces", url=store_url)
    assert bad.returncode == 2 and "patch id" in bad.stderr and len(bad.stderr.splitlines()) == 1
