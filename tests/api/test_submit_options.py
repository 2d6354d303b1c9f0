"""POST /runs takes every submission option the library takes, refuses what it does not
know (naming the field), checks the built-in jobs' bodies field by field, and shows
with an operator token the runs submitted with no tenant; on every backend."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

import runwright as rw
from runwright.store._params import RunCountParams

from ..integration.conftest import running_worker
from .test_api import OPERATOR_TOKEN, as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process
AT = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)


async def test_every_submission_option_over_http(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        async def submit(**body: object) -> dict:
            answer = await http.post("/runs", json={"task": "record", "args": {"n": 1}, **body})
            assert answer.status_code == 201, answer.text
            return answer.json()

        delayed = await submit(delay_s=60)
        assert delayed["run_at"] == pytest.approx(delayed["created_at"] + 60)
        assert (await submit(run_at="2031-01-01T01:00:00+01:00"))["run_at"] == AT.timestamp()
        assert (await submit(run_at="2031-01-01T00:00:00Z"))["run_at"] == AT.timestamp()
        assert (await submit(run_at=AT.timestamp()))["run_at"] == AT.timestamp()
        assert (await submit(priority=0))["priority"] == 0
        assert (await submit(queue="mail"))["queue"] == "mail"
        bounded = await submit(budget={"deadline_s": 30, "max_cost_usd": 0.5, "max_turns": 3})
        assert bounded["budget"] == {"deadline_s": 30, "max_cost_usd": 0.5, "max_turns": 3}
        assert bounded["deadline_at"] == pytest.approx(bounded["created_at"] + 30)
        keyed = await submit(key="k-1")
        again = await http.post("/runs", json={"task": "record", "args": {"n": 1}, "key": "k-1"})
        assert again.status_code == 200 and again.json()["id"] == keyed["id"]
        # The key names a run of other arguments: 409, nothing written; or that run, asked for.
        conflict = await http.post("/runs", json={"task": "record", "args": {"n": 2}, "key": "k-1"})
        assert conflict.status_code == 409 and conflict.headers["content-type"] == "application/problem+json"
        assert conflict.json()["title"] == "Key conflict"
        assert conflict.json()["detail"].startswith(f"key 'k-1' names run {keyed['id']}, which was submitted "
                                                    f"with other arguments;")
        accepted = await http.post("/runs", json={"task": "record", "args": {"n": 2}, "key": "k-1",
                                                  "on_conflict": "return"})
        assert accepted.status_code == 200 and accepted.json()["args"] == {"n": 1}
        assert len(await worker_app.list_runs(key="k-1")) == 1
        first = await submit(thread="t", delay_s=3600)
        assert first["thread"] == "t"
        busy = await http.post("/runs", json={"task": "record", "args": {"n": 2}, "thread": "t"})
        assert busy.status_code == 409 and busy.json()["title"] == "Thread busy"
        queued_behind = await submit(thread="t", on_busy="enqueue")
        assert queued_behind["state"] == "queued" and queued_behind["thread"] == "t"
        stored = await worker_app.store.run_get(queued_behind["id"])
        assert stored.tenant == "alice" and stored.thread == "t"
        # The open run is no agent (nor started): a steer waits its turn, as an enqueue.
        steered = await submit(thread="t", on_busy="steer")
        assert steered["state"] == "queued" and steered["thread"] == "t"


async def test_unknown_and_misspelt_fields_are_refused_naming_them(server: str,  # noqa: F811
                                                                   worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        for body, named in [
            ({"task": "record", "args": {"n": 1}, "delya_s": 5}, "body.delya_s"),
            ({"type": "record", "args": {"n": 1}}, "body.type"),  # the job type is spelled `task`
            ({"task": "record", "args": {"n": 1}, "budget": {"deadline": 5}}, "body.budget.deadline"),
            ({"task": "record", "args": {"n": 1, "key": "k"}}, "args.key"),  # an option, not an argument
            ({"task": "record", "args": {"n": 1}, "on_busy": "later"}, "body.on_busy"),
            ({"task": "record", "args": {"n": 1}, "on_conflict": "ignore"}, "body.on_conflict"),
            ({"task": "record", "args": {"n": 1}, "run_at": "2031-01-01T00:00:00"}, "time zone"),
            ({"task": "record", "args": {"n": 1}, "run_at": "soon"}, "ISO 8601"),
            ({"task": "record", "args": {"n": 1}, "run_at": 1e10, "delay_s": 1}, "not both"),
            ({"task": "webhook", "args": {"url": "http://x", "retries": 3}}, "body.args.retries"),
            ({"task": "webhook", "args": {}}, "body.args.url"),
            ({"task": "webhook", "args": {"url": "http://x", "timeout_s": "soon"}}, "body.args.timeout_s"),
            ({"task": "llm", "args": {"model": "openai:m", "prompt": "hi", "callback": {"url": "http://x",
                                      "allow_private": True}}}, "body.args.callback.allow_private"),
            ({"task": "chain", "args": {"steps": [{"id": "a", "type": "record", "args": {"n": 1}}]}},
             "body.args.steps.0.type"),
            ({"task": "chain", "args": {"steps": []}}, "body.args.steps"),
        ]:
            answer = await http.post("/runs", json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert named in answer.json()["detail"], (body, answer.json())
        hook = await http.post("/runs", json={"task": "webhook", "args": {"url": "https://example.com/h"}})
        assert hook.status_code == 201 and hook.json()["args"] == {"url": "https://example.com/h"}
    counts = await worker_app.store.run_count_by_state(RunCountParams())
    assert counts == {"queued": 1}  # the webhook only: nothing refused was stored


async def test_the_openapi_document_publishes_the_built_in_job_bodies(server: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server) as http:
        spec = (await http.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    assert set(schemas["WebhookArgs"]["properties"]) == {
        "url", "method", "headers", "body", "timeout_s", "max_response_bytes", "secret"}
    assert set(schemas["LlmArgs"]["properties"]) == {"prompt", "model", "input", "system", "callback"}
    assert set(schemas["ChainStep"]["properties"]) == {"id", "task", "args", "needs", "when",
                                                       "if_needs_skipped"}
    assert set(schemas["ChainArgs"]["properties"]) == {"steps", "input", "callback"}
    body = spec["paths"]["/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in body["oneOf"]} == {
        "WebhookSubmitIn", "LlmSubmitIn", "ChainSubmitIn", "TaskSubmitIn"}
    assert {"run_at", "budget", "thread", "on_busy", "delay_s", "key", "priority", "queue"} <= set(
        schemas["TaskSubmitIn"]["properties"])


async def test_runs_with_no_tenant_are_the_operators_and_a_tenant_is_told_why(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    from_python = await worker_app.submit("record", n=1, delay_s=3600)  # no tenant, as the CLI's
    async with httpx.AsyncClient(base_url=server) as http:
        mine = (await http.post("/runs", headers=as_("alice-token"),
                                json={"task": "record", "args": {"n": 2}})).json()
        assert mine["tenant"] == "alice"
        hidden = await http.get(f"/runs/{from_python.id}", headers=as_("alice-token"))
        assert hidden.status_code == 404
        assert "submitted with no tenant" in hidden.json()["detail"]
        assert "operator" in hidden.json()["detail"]
        # The same words for an id that exists nowhere: a tenant cannot probe ids.
        nowhere = await http.get("/runs/987654", headers=as_("alice-token"))
        assert nowhere.json()["detail"].replace("987654", "ID") == hidden.json()["detail"].replace(
            str(from_python.id), "ID")
        assert [r["id"] for r in (await http.get("/runs", headers=as_("alice-token"))).json()["items"]] == [
            mine["id"]]
        every = (await http.get("/runs", headers=as_(OPERATOR_TOKEN))).json()["items"]
        assert {(r["id"], r["tenant"]) for r in every} == {(from_python.id, None), (mine["id"], "alice")}
        seen = await http.get(f"/runs/{from_python.id}", headers=as_(OPERATOR_TOKEN))
        assert seen.status_code == 200 and seen.json()["tenant"] is None


async def test_a_tasks_arguments_are_checked_against_its_hints(server: str,  # noqa: F811
                                                               worker_app: rw.App) -> None:  # noqa: F811
    """`record(ctx, n: int)`: "7" is coerced (and stored as 7, which the worker runs), "abc" is
    a 422 problem naming the argument, as is a schedule's; nothing refused is stored."""
    async with httpx.AsyncClient(base_url=server, headers=as_(OPERATOR_TOKEN)) as http:
        created = await http.post("/runs", json={"task": "record", "args": {"n": "7"}})
        assert created.status_code == 201, created.text
        assert created.json()["args"] == {"n": 7}
        for path, body in [("/runs", {"task": "record", "args": {"n": "abc"}}),
                           ("/schedules", {"name": "nightly", "cron": "0 3 * * *", "task": "record",
                                           "args": {"n": "abc"}})]:
            refused = await http.post(path, json=body)
            assert refused.status_code == 422, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
            said = "Input should be a valid integer, unable to parse string as an integer (got 'abc')"
            assert refused.json() == {
                "type": "about:blank", "title": "Invalid input", "status": 422,
                "detail": f"task 'record': argument 'n': {said}",
                "errors": [{"field": "body.args.n", "message": said}]}
        async with running_worker(worker_app):
            assert await (await worker_app.get(created.json()["id"])).result(timeout_s=30) == 7
        assert (await http.get("/schedules")).json() == []
    assert await worker_app.store.run_count_by_state(RunCountParams()) == {"succeeded": 1}
