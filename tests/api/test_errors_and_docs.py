"""Every error of the HTTP API is application/problem+json (RFC 9457), whichever layer
answers it (a route, validation, routing, the body limit, auth, an unexpected failure),
and the API's documentation pages work offline: they load nothing from another host."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi import FastAPI

import runwright as rw

from .test_api import OPERATOR_TOKEN, as_, server, worker_app  # noqa: F401 (fixtures)
from .test_sse import serving_in_process

pytestmark = pytest.mark.process
TENANT = as_("alice-token")
JSON = {"content-type": "application/json"}


async def test_every_error_is_a_problem(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server) as http:
        queued = (await http.post("/runs", headers=TENANT, json={
            "task": "record", "args": {"n": 1}, "delay_s": 3600})).json()
        await http.post(f"/runs/{queued['id']}/cancel", headers=TENANT)
        table = [
            # (method, path, headers, request options, status, words of the detail)
            ("PUT", "/threads", TENANT, {}, 405, "allowed: GET, POST"),
            ("GET", "/threads", TENANT, {"params": {"after": "not-a-cursor"}}, 422, "not a cursor"),
            ("GET", "/threads", TENANT, {"params": {"limit": 501}}, 422, "limit"),
            ("DELETE", "/runs", TENANT, {}, 405, "allowed: GET, POST"),
            ("GET", "/no/such/path", TENANT, {}, 404, "no such path"),
            ("GET", "/runs/424242", TENANT, {}, 404, "run 424242 not found"),
            ("DELETE", "/schedules/nope", as_(OPERATOR_TOKEN), {}, 404, "unknown schedule 'nope'"),
            ("GET", "/runs/abc", TENANT, {}, 422, "run_id"),
            ("GET", "/runs", TENANT, {"params": {"limit": 0}}, 422, "limit"),
            ("GET", "/runs", TENANT, {"params": {"state": "sleeping"}}, 422, "state"),
            ("POST", "/runs", TENANT, {"content": b"{not json", "headers": JSON}, 422, "JSON"),
            ("POST", "/runs", TENANT, {"json": {"task": "nope"}}, 422, "unknown task 'nope'"),
            ("POST", "/runs", TENANT, {"content": b"[" * 5000 + b"]" * 5000, "headers": JSON}, 422, "nested"),
            ("POST", "/runs", TENANT, {"json": {"task": "record", "args": {"n": "y" * (3 << 20)}}},
             413, "limited to"),
            ("POST", f"/runs/{queued['id']}/retry", TENANT, {}, 409, "cancelled"),
            ("GET", "/runs", {}, {}, 401, "Bearer"),
            ("GET", "/runs", as_("wrong-token"), {}, 401, "Bearer"),
            ("GET", "/schedules", TENANT, {}, 403, "RUNWRIGHT_OPERATOR_TOKENS"),
            ("POST", "/schedules", TENANT, {"json": {"name": "x", "cron": "* * * * *", "task": "record"}},
             403, "operator"),
        ]
        for method, path, headers, options, status, words in table:
            extra_headers = {**headers, **options.pop("headers", {})}
            answer = await http.request(method, path, headers=extra_headers, **options)
            where = (method, path, answer.status_code, answer.text[:300])
            assert answer.status_code == status, where
            assert answer.headers["content-type"] == "application/problem+json", where
            body = answer.json()
            members = {"type", "title", "status", "detail"} | ({"errors"} if status == 422 else set())
            assert set(body) == members and body["status"] == status, where
            assert words in body["detail"], where
            if status == 422:  # one title, whichever layer refused (an unknown field, an argument)
                assert body["title"] == "Invalid input", where
            if status == 405:
                assert answer.headers["allow"], where
            if status == 401:
                assert answer.headers["www-authenticate"] == "Bearer", where


@pytest.mark.parametrize("backend", ["sqlite"])  # the checks are the same on every store
async def test_a_422_names_each_field_in_errors_as_its_openapi_schema_says(server: str) -> None:  # noqa: F811
    """A 422's `errors` lists each field it names, {"field", "message"}, whichever layer
    refused it (the request's validation, or the App's check of a submission's task and
    arguments); one that names no field has none. The OpenAPI document says so."""
    unknown = "unknown task 'nope'; registered tasks: "
    table = [
        ("POST", "/runs", {"json": {"task": "record", "args": {"n": "abc"}}},
         [("body.args.n", "Input should be a valid integer, unable to parse string as an integer "
                          "(got 'abc')")]),
        ("POST", "/runs", {"json": {"task": "record", "args": {"m": 1}}},
         [("body.args.m", "not an argument of the task"), ("body.args.n", "a required argument, missing")]),
        ("POST", "/runs", {"json": {"task": "record", "args": {"n": 1, "key": "k"}}},
         [("body.args.key", "'key' is a submission option, never a task's argument; give it beside args")]),
        ("POST", "/runs", {"json": {"task": "nope"}}, [("body.task", unknown)]),
        ("POST", "/runs", {"json": {"task": "record", "args": {"n": 1}, "priority": -1}},
         [("body.priority", "Input should be greater than or equal to 0")]),
        ("GET", "/runs", {"params": {"limit": 0, "state": "sleeping"}},
         [("query.state.0", "Input should be "),
          ("query.limit", "Input should be greater than or equal to 1")]),
        ("GET", "/runs/abc", {}, [("path.run_id", "Input should be a valid integer")]),
        ("GET", "/threads", {"params": {"after": "not-a-cursor"}}, []),  # names no field
    ]
    async with httpx.AsyncClient(base_url=server) as http:
        for method, path, options, expected in table:
            answer = await http.request(method, path, headers=TENANT, **options)
            where = (method, path, answer.text[:500])
            assert answer.status_code == 422 and answer.headers["content-type"] == "application/problem+json"
            errors = answer.json()["errors"]
            assert [e["field"] for e in errors] == [field for field, _ in expected], where
            for error, (_, message) in zip(errors, expected):
                assert set(error) == {"field", "message"} and error["message"].startswith(message), where
        schema = (await http.get("/openapi.json")).json()
    answers = schema["paths"]["/runs"]["post"]["responses"]["422"]["content"]
    published = {"schema": {"$ref": "#/components/schemas/ValidationProblem"}}
    assert answers == {"application/problem+json": published}
    problem = schema["components"]["schemas"]["ValidationProblem"]
    assert problem["required"] == ["type", "title", "status", "detail", "errors"]
    assert problem["properties"]["errors"]["items"] == {"$ref": "#/components/schemas/FieldError"}
    assert schema["components"]["schemas"]["FieldError"]["required"] == ["field", "message"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]  # FastAPI's, never sent


@pytest.mark.parametrize("backend", ["sqlite"])  # the handler is the same on every store
async def test_an_unexpected_failure_is_a_problem_that_reveals_nothing(store_url: str) -> None:
    def with_a_failing_route(api: FastAPI) -> None:
        @api.get("/failing")
        async def failing() -> None:
            raise RuntimeError("a secret of the server")

    async with rw.App(store_url) as app, serving_in_process(app, configure=with_a_failing_route) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            answer = await http.get("/failing")
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json() == {"type": "about:blank", "title": "Internal Server Error", "status": 500,
                             "detail": "the server failed to answer this request; its log has the error"}


@pytest.mark.parametrize("backend", ["sqlite"])  # the pages read no store
@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_load_only_from_this_server(server: str, page: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server) as http:
        html = await http.get(page)  # no token: the pages hold no data
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert not re.search(r"(https?:)?//[\w.-]+\.\w+", html.text), "a URL of another host"
        urls = set(re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']""", html.text))
        urls |= set(re.findall(r"""url: ?["']([^"']+)["']""", html.text))
        assert "/openapi.json" in urls and any(u.endswith(".js") for u in urls), urls
        for url in urls:
            assert url.startswith("/"), url
            asset = await http.get(url)
            assert asset.status_code == 200, (url, asset.status_code)
            assert len(asset.content) > 100, url
