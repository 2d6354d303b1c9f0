"""Every operation of the published OpenAPI document, probed by one tenant with another
tenant's ids and names: each answers 404 (another tenant's run is no run), 403 (what is the
operator's) or the prober's own, empty view; nothing of the other tenant leaks, and nothing
of it changes. Over a real `runwright serve`, on every backend."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import runwright as rw
from runwright.store._params import ThreadAppendParams

from ..integration.conftest import running_worker
from ..process import apps
from .test_api import OPERATOR_TOKEN, as_, server, serving, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process
MARKER = "alice-private-m4rk3r"  # in alice's arguments, results, events and thread messages
NEVER = 10**15  # a run id that exists in no tenant
ANSWER = {"question": 1, "value": True}  # what bob answers to alice's run
SIGNAL = {"name": "payment", "payload": {"paid": 1}}  # what bob sends alice's run
FORK = {"from_step": 0, "key": "k"}  # alice's key too: bob's fork of hers is refused all the same
EVENT = {"name": "payment.done", "data": {"paid": 1}, "id": "ev-1"}  # alice published ev-1 otherwise

# Each operation of the OpenAPI document, and what bob gets when he aims it at alice's.
# A new operation fails test_every_operation_is_probed until it is classified here.
EXPECTED: dict[tuple[str, str], int] = {
    ("GET", "/healthz"): 200,
    ("GET", "/readyz"): 200,
    ("GET", "/metrics"): 403,
    ("GET", "/summary"): 200,  # bob's own, empty counts
    ("POST", "/runs"): 201,  # alice's key and thread name make bob a run of his own
    ("GET", "/runs"): 200,  # bob's own, empty list, whatever the filters
    ("GET", "/runs/{run_id}"): 404,
    ("GET", "/dead"): 200,
    ("POST", "/runs/{run_id}/cancel"): 404,
    ("POST", "/runs/{run_id}/retry"): 404,
    ("POST", "/runs/{run_id}/pause"): 404,
    ("POST", "/runs/{run_id}/resume"): 404,
    ("POST", "/runs/{run_id}/fork"): 404,  # another tenant's run is no run to fork
    ("GET", "/runs/{run_id}/events"): 404,
    ("GET", "/runs/{run_id}/events/stream"): 404,
    ("POST", "/threads"): 201,  # a fresh id, nothing else
    ("GET", "/threads/{thread}"): 404,  # bob has no such thread
    ("GET", "/threads"): 200,  # bob's threads: none
    ("GET", "/threads/{thread}/messages"): 404,  # bob has no such thread
    ("GET", "/threads/{thread}/runs"): 200,  # likewise
    ("DELETE", "/threads/{thread}"): 404,  # bob has no such thread
    ("POST", "/threads/{thread}/cancel"): 200,  # bob's thread of that name: nothing to cancel
    ("GET", "/threads/{thread}/events"): 404,  # bob has no such thread
    ("GET", "/threads/{thread}/events/stream"): 404,
    ("GET", "/schedules"): 403,
    ("POST", "/schedules"): 403,  # not even to redefine the deployment's schedule
    ("DELETE", "/schedules/{name}"): 403,
    ("POST", "/schedules/{name}/pause"): 403,
    ("POST", "/schedules/{name}/resume"): 403,
    ("GET", "/workers"): 200,  # the deployment's workers: no tenant's data
    ("GET", "/questions"): 200,  # bob's own pending questions: none
    ("GET", "/runs/{run_id}/questions"): 404,
    ("POST", "/runs/{run_id}/answers"): 404,
    ("GET", "/runs/{run_id}/signals"): 404,
    ("POST", "/runs/{run_id}/signals"): 404,
    ("POST", "/signal-with-start"): 201,  # alice's key makes bob a run of his own
    ("POST", "/events"): 201,  # alice's event id is bob's own: it wakes and starts nothing of hers
    ("GET", "/runs/{run_id}/state"): 404,
    ("POST", "/runs/{run_id}/updates"): 404,
    ("GET", "/patches/{patch_id}"): 200,  # bob's own live runs: none
    ("POST", "/bulk"): 200,  # bob's own runs: none match
    ("POST", "/runs/{run_id}/queries/{name}"): 404,
    ("GET", "/fleet"): 403,  # the fleet bus is the operator's
    ("POST", "/fleet/broadcast"): 403,
    ("GET", "/metrics/series"): 200,  # bob's own charts: nothing ended, nothing queued
    ("GET", "/runs/{run_id}/attempts"): 404,
    ("GET", "/runs/{run_id}/steps"): 404,
    ("GET", "/runs/{run_id}/children"): 404,
    ("POST", "/dead/retry"): 200,  # each of alice's ids refused as not found
    ("POST", "/session"): 200,  # bob signs in as bob
    ("GET", "/session"): 200,  # bob is bob
    ("DELETE", "/session"): 204,
}


async def seed_alice(worker_app: rw.App) -> dict[str, Any]:  # noqa: F811 (the fixture's value)
    """Alice's runs (one ended, with a result and events; one queued for later), her thread
    with a message, and the deployment's schedule."""
    @worker_app.task
    async def remember(ctx: rw.Context, text: str) -> str:
        run = ctx.run
        await ctx.runtime.store.thread_append(ThreadAppendParams(run.id, run.fence, "t", 0, json.dumps(text)))
        await ctx.emit("note", {"text": text})
        return text

    alice = worker_app.tenant("alice")
    async with running_worker(worker_app):
        done = await alice.submit(remember, MARKER, key="k", thread="t")
        await done.result(timeout_s=30)
    later = await alice.submit(remember, MARKER, key="later", delay_s=3600)
    spec = worker_app.schedule_spec("hourly", cron="0 * * * *", task=apps.record, args={"n": 1}, tz="UTC",
                                    misfire="skip", catch_up_limit=10, queue=None, priority=None)
    await worker_app.save_schedule(spec)
    await alice.publish_event("payment.done", {"secret": MARKER}, id="ev-1")
    return {"done": done.id, "later": later.id}


def requests_for(method: str, path: str, ids: dict[str, Any]) -> list[dict[str, Any]]:
    """The probes of one operation: alice's ids in the path, and in the query where one fits."""
    probes = []
    for run_id in (ids["done"], ids["later"]):
        url = path.format(run_id=run_id, thread="t", name="stage" if "/queries/" in path else "hourly",
                          patch_id="lookup-v2")
        probe: dict[str, Any] = {"method": method, "url": url, "headers": as_("bob-token")}
        if path == "/runs":
            probe["params"] = {"thread": "t", "before": ids["later"] + 1, "task": "remember", "key": "k",
                               "forked_from": ids["done"]}
        if path == "/runs" and method == "POST":
            probe = {"method": method, "url": url, "headers": as_("bob-token"),
                     "json": {"task": "record", "args": {"n": 1}, "key": "k", "thread": "t",
                              "delay_s": 3600}}
        if (method, path) == ("POST", "/runs/{run_id}/answers"):
            probe["json"] = ANSWER
        if (method, path) == ("POST", "/runs/{run_id}/signals"):
            probe["json"] = SIGNAL
        if (method, path) == ("POST", "/runs/{run_id}/fork"):
            probe["json"] = FORK
        if (method, path) == ("POST", "/bulk"):
            probe["json"] = {"action": "retry", "states": ["succeeded", "queued"]}
        if (method, path) == ("POST", "/runs/{run_id}/updates"):
            probe["json"] = {"name": "discount", "payload": 5, "timeout_s": 1}
        if (method, path) == ("POST", "/runs/{run_id}/queries/{name}"):
            probe["json"] = {"args": {}}
        if (method, path) == ("POST", "/events"):
            probe["json"] = EVENT
        if (method, path) == ("POST", "/signal-with-start"):
            probe["json"] = {"task": "record", "args": {"n": 1}, "key": "later", "signal": SIGNAL}
        if (method, path) == ("POST", "/dead/retry"):
            probe["json"] = {"ids": [ids["done"], ids["later"]]}
        if (method, path) == ("POST", "/session"):
            probe["json"] = {"token": "bob-token"}
        if (method, path) == ("POST", "/schedules"):
            probe["json"] = {"name": "hourly", "cron": "* * * * * *", "task": "record", "args": {"n": 2}}
        if path.endswith("/stream"):
            probe["headers"]["Last-Event-ID"] = "0"
        probes.append(probe)
        if "{run_id}" not in path:
            break
    return probes


async def test_every_operation_is_probed_and_none_lets_bob_into_alices(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    ids = await seed_alice(worker_app)
    async with httpx.AsyncClient(base_url=server, timeout=30) as http:
        spec = (await http.get("/openapi.json")).json()
        operations = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
        assert operations == set(EXPECTED)  # a new operation must be classified above
        # POST /runs last: it gives bob a thread "t" of his own, which the probes before it
        # must find empty.
        # signal-with-start then POST /runs last: each makes bob a run of his own, which the
        # probes of his (empty) counts and charts before them must not see.
        last = [("POST", "/signal-with-start"), ("POST", "/runs")]
        for method, path in sorted(operations, key=lambda op: last.index(op) + 1 if op in last else 0):
            for probe in requests_for(method, path, ids):
                answer = await http.request(**probe)
                assert answer.status_code == EXPECTED[method, path], (probe, answer.text)
                assert MARKER not in answer.text, (probe, answer.text)
                await check_own_view(http, method, path, answer)
        await check_alice_untouched(http, ids)


async def check_own_view(http: httpx.AsyncClient, method: str, path: str, answer: httpx.Response) -> None:
    """A 2xx answer is bob's own, empty view, and a 404 reads exactly like an id that never
    existed (ids cannot be probed)."""
    body = answer.json() if answer.headers.get("content-type", "").endswith("json") else None
    if (method, path) in (("GET", "/runs"), ("GET", "/dead"), ("GET", "/threads/{thread}/runs"),
                          ("POST", "/threads/{thread}/cancel"), ("GET", "/threads")):
        assert body["items"] == []
    elif (method, path) == ("GET", "/questions"):
        assert body == []
    elif path == "/bulk":
        assert (body["matched"], body["done"], body["refused"]) == (0, [], {})
    elif path == "/patches/{patch_id}":
        assert (body["patched"], body["unpatched"]) == ([], [])
    elif answer.status_code == 404 and "{thread}" in path:  # as a name no thread bears
        assert body["detail"] == "thread 't' does not exist"
    elif path == "/metrics/series":
        assert not any(body["ended"]) and body["queue_depth"]["now"] == 0
    elif (method, path) == ("POST", "/dead/retry"):
        assert body["retried"] == [] and len(body["refused"]) == 2
    elif path == "/session" and method != "DELETE":
        assert body == {"tenant": "bob", "operator": False, "auth": True, "operator_decode": False}
    elif path == "/summary":
        assert all(body[state] == 0 for state in ("queued", "running", "succeeded", "dead"))
        assert body["queues"] == [] and body["queue_depths"] == {}
    elif (method, path) == ("POST", "/runs"):
        assert body["args"] == {"n": 1} and body["thread"] == "t"
    elif (method, path) == ("POST", "/events"):
        assert (body["woken"], body["started"], body["existed"]) == ([], [], False)
    elif (method, path) == ("POST", "/signal-with-start"):
        assert body["run"]["args"] == {"n": 1} and body["signal"]["sent_by"] == "bob"
    elif answer.status_code == 404 and "{run_id}" in path:
        bodies = {"/answers": ANSWER, "/signals": SIGNAL, "/fork": FORK, "/queries/{name}": {"args": {}},
                  "/updates": {"name": "discount", "payload": 5, "timeout_s": 1}}
        json_body = next((b for end, b in bodies.items() if path.endswith(end) and method == "POST"), None)
        never = await http.request(method, path.format(run_id=NEVER, name="stage"), headers=as_("bob-token"),
                                   json=json_body)
        assert never.status_code == 404 and never.json()["title"] == body["title"]


async def check_alice_untouched(http: httpx.AsyncClient, ids: dict[str, Any]) -> None:
    alice = as_("alice-token")
    assert (await http.get(f"/runs/{ids['later']}", headers=alice)).json()["state"] == "queued"
    done = (await http.get(f"/runs/{ids['done']}", headers=alice)).json()
    assert done["state"] == "succeeded" and done["result"] == MARKER and done["key"] == "k"
    assert (await http.get("/threads/t/messages", headers=alice)).json()["messages"] == [MARKER]
    thread_runs = (await http.get("/threads/t/runs", headers=alice)).json()["items"]
    assert [r["id"] for r in thread_runs] == [ids["done"]]
    (hourly,) = (await http.get("/schedules", headers=as_(OPERATOR_TOKEN))).json()
    assert hourly["paused"] is False and hourly["cron"] == "0 * * * *"
    bobs = (await http.get("/runs", headers=as_("bob-token"))).json()["items"]
    # his own, apart from alice's: the run POST /runs made, and signal-with-start's
    assert [(r["key"], r["thread"]) for r in bobs] == [("k", "t"), ("later", None)]


async def test_tenants_whose_names_join_alike_stay_apart(store_url: str, tmp_path) -> None:
    # "team-a" + "x/k1" and "team-a/x" + "k1" read alike if joined with "/": two runs, two threads.
    tokens = {"a-token": "team-a", "ax-token": "team-a/x"}
    async with serving(store_url, tmp_path, tokens) as base, httpx.AsyncClient(base_url=base) as http:
        body = {"task": "record", "args": {"n": 1}, "delay_s": 3600}
        first = await http.post("/runs", headers=as_("a-token"),
                                json={**body, "key": "x/k1", "thread": "x/t"})
        second = await http.post("/runs", headers=as_("ax-token"),
                                 json={**body, "key": "k1", "thread": "t"})
        assert first.status_code == 201 and second.status_code == 201, second.text  # not ThreadBusy
        assert first.json()["id"] != second.json()["id"]
        for token, own, key, thread in (("a-token", first, "x/k1", "x/t"), ("ax-token", second, "k1", "t")):
            listed = (await http.get("/runs", headers=as_(token))).json()["items"]
            assert [r["id"] for r in listed] == [own.json()["id"]]
            again = await http.post("/runs", headers=as_(token), json={**body, "key": key, "thread": thread})
            assert again.status_code == 200 and again.json()["id"] == own.json()["id"]
        assert (await http.get("/threads/t/runs", headers=as_("a-token"))).json()["items"] == []
        assert (await http.get("/threads/x/t/runs", headers=as_("a-token"))).status_code == 404  # a path
        threads = (await http.get("/runs", headers=as_("ax-token"), params={"thread": "t"})).json()["items"]
        assert [r["id"] for r in threads] == [second.json()["id"]]
