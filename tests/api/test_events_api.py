"""Events awaited by key over HTTP and the CLI, on every backend: published by the caller's
identity within its tenant, delivered once to the waits that fit, starting the runs of the
tasks declared on it, idempotent by id; bad input refused in one line."""

from __future__ import annotations

import json

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


async def _parked(app: rw.App, *run_ids: int) -> bool:
    runs = await app.store.run_get_many(list(run_ids))
    return len(runs) == len(run_ids) and all(r.waiting == WaitReason.SIGNAL for r in runs)


async def test_an_event_over_http_reaches_its_tenants_waits_once_and_starts_its_runs(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        submit = {"task": "await_doc", "args": {"doc_id": "d7"}}
        alices = [(await http.post("/runs", json=submit)).json()["id"] for _ in range(2)]
        bobs = (await http.post("/runs", json=submit, headers=as_("bob-token"))).json()["id"]
        async with running_worker(worker_app):
            await wait_until(lambda: _parked(worker_app, *alices, bobs), "the runs park on their waits")
            for bad in ({"name": "no spaces"}, {"name": "doc.processed", "extra": 1}, {"data": 1},
                        {"name": "doc.processed", "id": ""}):
                refused = await http.post("/events", json=bad)
                assert refused.status_code == 422, refused.text
                assert refused.headers["content-type"] == "application/problem+json"
            event = {"name": "doc.processed", "data": {"doc_id": "d7", "ok": True}, "id": "ev-7", "by": "etl"}
            published = await http.post("/events", json=event)
            assert published.status_code == 201, published.text
            body = published.json()
            assert (sorted(body["woken"]), body["full"], body["existed"]) == (sorted(alices), [], False)
            (started,) = body["started"]
            again = await http.post("/events", json=event)
            assert again.status_code == 200
            assert (sorted(again.json()["woken"]), again.json()["started"], again.json()["existed"]) == (
                sorted(alices), [], True)
            changed = await http.post("/events", json={**event, "data": {"doc_id": "d8"}})
            assert changed.status_code == 409 and changed.json()["title"] == "Key conflict"
            for run_id in alices:
                result = await (await worker_app.get(run_id)).result(timeout_s=30)
                assert result["event"] == event["data"]
            indexed = await (await worker_app.get(started)).result(timeout_s=30)
            assert indexed == {"indexed": "d7"}
        (delivered,) = await worker_app.signals(alices[0])
        assert delivered.sent_by == "alice:etl"
        # Bob's run waits on: alice's event is not his, and his own is another run's.
        assert await _parked(worker_app, bobs)
        assert (await worker_app.get(started)).run.tenant == "alice"
        own = await http.post("/events", json={**event, "id": None}, headers=as_("bob-token"))
        assert own.status_code == 201 and own.json()["woken"] == [bobs]
        assert own.json()["id"] not in ("", None, "ev-7"), "a fresh id when none is given"


async def test_the_cli_publishes_an_event(store_url: str, worker_app: rw.App) -> None:  # noqa: F811
    handle = await worker_app.submit(apps.await_doc, doc_id="c1")
    async with running_worker(worker_app):
        await wait_until(lambda: _parked(worker_app, handle.id), "the run parks on its wait")
        for bad_args, why in [(["doc.processed", "not json"], "not JSON"), (["no spaces"], "event name")]:
            refused = cli("publish", *bad_args, url=store_url)
            assert refused.returncode == 2, refused
            assert why in refused.stderr and "Traceback" not in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        missed = cli("publish", "doc.processed", '{"doc_id": "other"}', url=store_url)
        assert missed.returncode == 0, missed.stderr
        assert "0 waiting runs woken; no run started (give --app" in missed.stdout
        sent = cli("publish", "doc.processed", '{"doc_id": "c1"}', "--id", "c-1", "--by", "ops", "--json",
                   "--app", "tests.process.apps:app", url=store_url)
        assert sent.returncode == 0, sent.stderr
        published = json.loads(sent.stdout)
        assert (published["id"], published["woken"], len(published["started"])) == ("c-1", [handle.id], 1)
        assert (await handle.result(timeout_s=30))["event"] == {"doc_id": "c1"}
    again = cli("publish", "doc.processed", '{"doc_id": "c1"}', "--id", "c-1", "--app",
                "tests.process.apps:app", url=store_url)
    assert again.returncode == 0 and "was published before: nothing delivered again" in again.stdout
    conflict = cli("publish", "doc.processed", '{"doc_id": "c2"}', "--id", "c-1", url=store_url)
    assert conflict.returncode == 2 and "KeyConflict" in conflict.stderr
    assert len(conflict.stderr.strip().splitlines()) == 1
