"""Bad input, face by face: the same inputs through the library, the `runwright` command
and HTTP, each refused with its documented answer (an error type, an exit code, a
status) and one clear line, with nothing written. Real stores, real processes.

CLI exit codes (README): 2 a bad input or setting, 3 the store unreachable.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx
import pytest

import runwright as rw
from runwright.store._params import RunCountParams
from runwright.tasks._serde import MAX_DEPTH

from ..api.test_api import OPERATOR_TOKEN, server  # noqa: F401 (fixture)
from ..process.harness import APP_SPEC, ROOT, client

DEEP = 100_000
TOO_DEEP = f"is nested deeper than the limit of {MAX_DEPTH} levels"
LIMIT_REFUSED = "limit must be an integer in 1..2147483647, got -1"
QUEUE_REFUSED = "queue must be a non-empty string of at most 200 characters, got 5"
NOT_AN_INT = ("task 'record': argument 'n': Input should be a valid integer, unable to parse string as "
              "an integer (got 'abc')")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_text(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.fixture
async def app(store_url: str) -> AsyncIterator[rw.App]:
    async with client(store_url) as app:
        yield app


async def _nothing_written(app: rw.App) -> None:
    assert await app.store.run_count_by_state(RunCountParams()) == {}


# -- the library -----------------------------------------------------------------------

LIBRARY: list[tuple[str, Callable[[rw.App], Awaitable[Any]], type[Exception], str]] = [
    ("arguments 100,000 deep", lambda app: app.submit("keep", value=nested(DEEP)),
     rw.SerializationError, f"arguments of task 'keep' {TOO_DEEP}"),
    ("arguments one level too deep", lambda app: app.submit("keep", value=nested(MAX_DEPTH)),
     rw.SerializationError, f"arguments of task 'keep' {TOO_DEEP}"),
    ("a deep item of many", lambda app: app.submit_many("keep", [{"value": 1}, {"value": nested(DEEP)}]),
     rw.SerializationError, f"item 1: arguments of task 'keep' {TOO_DEEP}"),
    ("a deep argument of an int", lambda app: app.submit("record", n=nested(DEEP)),
     rw.BadArguments, "task 'record': argument 'n': Input should be a valid integer (got [[[[...]]]])"),
    ("an argument not of its hint", lambda app: app.submit("record", n="abc"),
     rw.BadArguments, NOT_AN_INT),
    ("a queue that is not a string", lambda app: app.submit("record", n=1, queue=5),
     rw.InvalidInput, QUEUE_REFUSED),
    ("an empty queue", lambda app: app.submit("record", n=1, queue=""),
     rw.InvalidInput, "queue must be a non-empty string of at most 200 characters, got ''"),
    ("a negative limit", lambda app: app.list_runs(limit=-1), rw.InvalidInput, LIMIT_REFUSED),
    ("a limit that is a string", lambda app: app.list_runs(limit="10"),
     rw.InvalidInput, "limit must be an integer in 1..2147483647, got '10'"),
    ("a cursor that is not an id", lambda app: app.list_runs(before_id=0),
     rw.InvalidInput, "before_id must be an integer in 1..9223372036854775807, got 0"),
    ("a state that is a string", lambda app: app.list_runs(states=["queued"]),
     rw.InvalidInput, "states must be RunState values"),
    ("a queue filter that is not a string", lambda app: app.list_runs(queue=5),
     rw.InvalidInput, QUEUE_REFUSED),
    ("a negative dead-letter limit", lambda app: app.dead_letters(limit=-1),
     rw.InvalidInput, LIMIT_REFUSED),
]


@pytest.mark.parametrize("call, error, message", [row[1:] for row in LIBRARY],
                         ids=[row[0] for row in LIBRARY])
async def test_the_library_refuses(app: rw.App, call, error, message) -> None:
    with pytest.raises(error) as refused:
        await call(app)
    assert str(refused.value).startswith(message), str(refused.value)
    await _nothing_written(app)


# -- the command line ------------------------------------------------------------------

def runwright(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwright", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "RUNWRIGHT_URL": url,
                                                       "RUNWRIGHT_TOKENS": "t=tenant"})


def _deep_json_file(tmp_path: Path) -> str:
    path = tmp_path / "deep.json"
    path.write_text('{"task": "record", "args": {"n": ' + nested_text(DEEP) + "}}")
    return f"@{path}"


# Each row: the arguments (a callable of tmp_path where a file is needed), the exit code,
# the first line of stderr (its start).
CLI: list[tuple[str, Callable[[Path], list[str]], int, str]] = [
    ("--args 50,000 deep", lambda _: ["submit", APP_SPEC, "record", "--args",
                                      '{"n": ' + nested_text(50_000) + "}"],
     2, f"error: SerializationError: --args {TOO_DEEP}"),
    ("--args one level too deep", lambda _: ["submit", APP_SPEC, "record", "--args",
                                             '{"n": ' + nested_text(MAX_DEPTH) + "}"],
     2, f"error: SerializationError: --args {TOO_DEEP}"),
    ("--json 100,000 deep", lambda tmp: ["submit", "--json", _deep_json_file(tmp)],
     2, f"error: SerializationError: --json {TOO_DEEP}"),
    ("--args not of the task's hints", lambda _: ["submit", APP_SPEC, "record", "--args", '{"n": "abc"}'],
     2, f"error: BadArguments: {NOT_AN_INT}"),
    ("a queue that is not a string in --json",
     lambda _: ["submit", APP_SPEC, "--json", json.dumps({"task": "record", "args": {"n": 1}, "queue": 5})],
     2, f"error: InvalidInput: {QUEUE_REFUSED}"),
    ("a priority that is not a number in --json",
     lambda _: ["submit", APP_SPEC, "--json", json.dumps({"task": "record", "args": {"n": 1},
                                                          "priority": "high"})],
     2, "error: InvalidInput: priority must be an int in 0..32767"),
    ("runs --limit -1", lambda _: ["runs", "--limit", "-1"], 2, f"error: InvalidInput: --{LIMIT_REFUSED}"),
    ("dead --limit -1", lambda _: ["dead", "--limit", "-1"], 2, f"error: InvalidInput: --{LIMIT_REFUSED}"),
    ("show --decode without the payload keys", lambda _: ["show", "1", "--decode"],
     2, "error: --decode needs the payload keys (RUNWRIGHT_PAYLOAD_KEYS)"),
]


@pytest.mark.process
@pytest.mark.parametrize("args, code, first_line", [row[1:] for row in CLI], ids=[row[0] for row in CLI])
async def test_the_command_line_refuses(app: rw.App, store_url: str, tmp_path: Path,
                                        args, code, first_line) -> None:
    done = runwright(*args(tmp_path), url=store_url)
    assert done.returncode == code, done.stderr
    assert done.stderr.splitlines()[0].startswith(first_line), done.stderr[:500]
    assert "Traceback" not in done.stderr
    await _nothing_written(app)


# At start, before any store is used (the URL names no database: reaching it would be exit
# 4): the same answers whatever the backend.
STARTS: list[tuple[str, list[str], int, str]] = [
    ("serve, PostgreSQL unreachable",
     ["serve", APP_SPEC, "--port", "9", "--url", "postgresql://postgres@127.0.0.1:1/nope"],
     3, "error: StoreUnreachable: postgresql: cannot connect to postgresql://postgres@127.0.0.1:1/nope"),
    ("serve, Redis unreachable", ["serve", APP_SPEC, "--port", "9", "--url", "redis://127.0.0.1:1/0"],
     3, "error: StoreUnreachable: redis: cannot connect to redis://127.0.0.1:1/0"),
    ("a worker pool of an unknown module", ["worker", "no_such_module:app", "-p", "2"],
     2, "error: ConfigError: cannot import 'no_such_module'"),
    ("a worker pool, PostgreSQL unreachable",
     ["worker", APP_SPEC, "-p", "2", "--url", "postgresql://postgres@127.0.0.1:1/nope"],
     3, "error: StoreUnreachable: postgresql: cannot connect to postgresql://postgres@127.0.0.1:1/nope"),
    ("a worker pool with a NaN lease", ["worker", APP_SPEC, "-p", "2", "--lease-s", "nan"],
     2, "error: InvalidInput: --lease-s must be a finite number > 0"),
    ("verify with an infinite timeout", ["verify", "--timeout-s", "inf"],
     2, "error: InvalidInput: --timeout-s must be a finite number > 0"),
    ("a sweep's batch past any store's range",
     ["sweep", "--max-age-s", "60", "--batch", "100000000000000000000"],
     2, "error: InvalidInput: --batch must be an integer in 1..100000, got 100000000000000000000"),
    ("thread follow after a tseq past the range",
     ["thread", "follow", "t", "--after", "100000000000000000000"],
     2, "error: InvalidInput: --after must be an integer in 0..2147483647"),
    ("thread follow after -1", ["thread", "follow", "t", "--after", "-1"],
     2, "error: InvalidInput: --after must be an integer in 0..2147483647, got -1"),
    ("an answer by no one", ["answer", "1", "0", '"yes"', "--by", ""],
     2, "error: InvalidInput: --by must be a non-empty string"),
    ("a move from Redis (not yet)", ["move", "--url", "redis://127.0.0.1:6379/0", "--to", "sqlite:///other.db"],
     2, "error: ConfigError: redis: `runwright move` moves from SQLite or PostgreSQL to SQLite,"),
    ("a move of no database", ["move", "--to", "sqlite:///other.db"],
     4, "error: SchemaError: no such database"),
    ("a move without --to", ["move"], 2, "error: InvalidInput: --to URL is required"),
    ("serve --operator-decode without the payload keys",
     ["serve", APP_SPEC, "--port", "9", "--operator-decode"],
     2, "error: --operator-decode needs the payload keys"),
    ("a move checked and dry-run at once", ["move", "--check", "--dry-run", "--to", "sqlite:///other.db"],
     2, "error: InvalidInput: give one of --check, --dry-run, --abandon"),
]


@pytest.mark.process
@pytest.mark.parametrize("args, code, message", [row[1:] for row in STARTS], ids=[row[0] for row in STARTS])
def test_a_command_that_cannot_start_says_why_in_one_line(args, code, message) -> None:
    """One line, once: a pool checks what would stop each of its workers before it starts
    any (it used to print each worker's error, three tries each)."""
    done = runwright(*args, url="sqlite:///unused.db")
    assert done.returncode == code, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(message), done.stderr[-500:]


# -- HTTP ------------------------------------------------------------------------------

# Each row: method, path, JSON body (or raw text), status, the start of the problem's detail.
HTTP: list[tuple[str, str, str, Any, int, str]] = [
    ("a body 100,000 deep", "POST", "/runs",
     '{"task": "record", "args": {"n": ' + nested_text(DEEP) + "}}",
     422, f"the request body {TOO_DEEP}"),
    ("arguments one level too deep", "POST", "/runs",
     '{"task": "keep", "args": {"value": ' + nested_text(MAX_DEPTH) + "}}",
     422, f"arguments of task 'keep' {TOO_DEEP}"),
    ("arguments not of the task's hints", "POST", "/runs",
     json.dumps({"task": "record", "args": {"n": "abc"}}), 422, NOT_AN_INT),
    ("a queue that is not a string", "POST", "/runs",
     json.dumps({"task": "record", "args": {"n": 1}, "queue": 5}),
     422, "body.queue: Input should be a valid string"),
    ("an empty queue", "POST", "/runs", json.dumps({"task": "record", "args": {"n": 1}, "queue": ""}),
     422, "queue must be a non-empty string"),
    ("an on_busy without a thread", "POST", "/runs",
     json.dumps({"task": "record", "args": {"n": 1}, "on_busy": "enqueue"}),
     422, "on_busy='enqueue' says what to do when a thread has an open run"),
    ("an on_conflict no submission takes", "POST", "/runs",
     json.dumps({"task": "record", "args": {"n": 1}, "on_conflict": "ignore"}),
     422, "body.on_conflict: Input should be 'reject' or 'return'"),
    ("a negative limit", "GET", "/runs?limit=-1", None, 422, "query.limit: Input should be greater than"),
    ("a negative dead-letter limit", "GET", "/dead?limit=-1", None, 422,
     "query.limit: Input should be greater than"),
    ("a decode that is neither 1 nor 0", "GET", "/runs?decode=maybe", None, 422,
     "query.decode: is 1 or 0 (true or false), got 'maybe'"),
    ("decode on a server without --operator-decode", "GET", "/runs?decode=1", None, 403,
     "this server keeps tenants' encrypted payloads sealed to the operator"),
]


@pytest.mark.process
async def test_http_refuses(server: str, app: rw.App) -> None:  # noqa: F811
    """One server for the whole table (starting one per row would cost more than the rows)."""
    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                                 timeout=60) as http:
        for name, method, path, body, status, detail in HTTP:
            answer = await http.request(method, path, content=body,
                                        headers={"Content-Type": "application/json"})
            assert answer.status_code == status, (name, answer.text[:300])
            assert answer.headers["content-type"] == "application/problem+json", name
            assert answer.json()["detail"].startswith(detail), (name, answer.json()["detail"][:300])
    await _nothing_written(app)


# -- every HTTP route, every parameter ---------------------------------------------------
#
# From the OpenAPI document: each operation's path, query and header parameters and the
# fields of its JSON body, each given every hostile value of its kind while the rest of the
# request is valid. A new route is covered as it is published, or fails here for want of a
# value for its path parameters or of a valid body to start from. Served in process (an
# ASGI transport over create_server, tokens on), on every backend.

OPERATOR = "op-token"
# {run}: the seeded run's id. "nightly" names a schedule, and is a query's name no task has.
PATH_VALUES = {"run_id": "{run}", "thread": "t", "name": "nightly", "patch_id": "lookup-v2"}
# A valid body of each operation that takes one: each hostile value replaces one field.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/runs"): {"task": "record", "args": {"n": 1}},
    ("POST", "/schedules"): {"name": "nightly", "cron": "0 3 * * *", "task": "record", "args": {"n": 1}},
    ("POST", "/runs/{run_id}/answers"): {"question": 0, "value": 1},
    ("POST", "/fleet/broadcast"): {"op": "ping", "timeout_s": 1},
    ("POST", "/session"): {"token": OPERATOR},
    ("POST", "/dead/retry"): {"ids": [1]},
    ("POST", "/runs/{run_id}/signals"): {"name": "payment", "payload": 1},
    ("POST", "/signal-with-start"): {"task": "record", "args": {"n": 1}, "key": "k-start",
                                     "signal": {"name": "go"}},
    ("POST", "/runs/{run_id}/queries/{name}"): {"args": {}},
    ("POST", "/runs/{run_id}/updates"): {"name": "discount", "payload": 5, "timeout_s": 0.1},
    ("POST", "/bulk"): {"action": "retry", "dry_run": True},
    ("POST", "/runs/{run_id}/fork"): {"from_step": 0, "args": {"n": 2}, "key": "fork-1"},
    ("POST", "/events"): {"name": "doc.processed", "data": {"doc_id": 1}},
}
# Body fields where a hostile value is answered in a 2xx by design, and why.
ANSWERED_IN_A_2XX = {
    ("POST", "/dead/retry", "ids"): "each id is answered, an id no run has as refused (not found)",
}
OVER_LONG = "x" * 5000
# (label, raw query/path text, must be refused): text that only decodes to U+FFFD (bytes
# that are not UTF-8) is ordinary text and may be found or not; the rest must be refused.
URL_TEXT = [("NUL", "%00", True), ("a control character", "a%01", True),
            ("over-long", OVER_LONG, True), ("a surrogate's bytes", "%ED%A0%80", False),
            ("a byte that is not UTF-8", "%FF", False)]
URL_INTEGER = [("negative", "-1"), ("huge", "99999999999999999999"), ("non-ASCII digits", "%C2%B2"),
               ("Arabic-Indic digits", "%D9%A3"), ("exponent", "1e3"), ("empty", ""), ("inf", "inf"),
               ("NaN", "nan"), ("hex", "0x10"), ("NUL", "%00")]
URL_NUMBER = [("negative", "-1"), ("inf", "inf"), ("NaN", "nan"), ("overflow", "1e400"),
              ("Arabic-Indic digits", "%D9%A3"), ("empty", ""), ("NUL", "%00")]
def _cursor(created_at: str, tenant: str, thread: str) -> str:
    """A thread-list cursor as `after` carries it (base64 of JSON), forged."""
    text = f"[{created_at}, {tenant}, {thread}]".encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


# Cursors that decode to what no listed thread has: a NUL or lone surrogate in its name
# or tenant, an infinite time (1e400 is JSON for it), a name over the limit.
CURSORS = [("a cursor naming a NUL", _cursor("1.0", "null", '"a\\u0000"')),
           ("a cursor naming a lone surrogate", _cursor("1.0", "null", '"\\ud800"')),
           ("a cursor of a NUL tenant", _cursor("1.0", '"\\u0000"', '"t"')),
           ("a cursor of an infinite time", _cursor("1e400", "null", '"t"')),
           ("a cursor of an over-long name", _cursor("1.0", "null", f'"{OVER_LONG[:300]}"'))]
# Headers carry bytes (Latin-1 as Starlette reads them): no NUL can be sent.
HEADER_TEXT = [("non-ASCII digits", b"\xb2"), ("huge", b"99999999999999999999"), ("negative", b"-1"),
               ("over-long", b"9" * 100), ("a colon alone", b":"), ("control characters", b"1\x01")]
# JSON bodies: raw JSON text for each value (NaN and Infinity are tokens Python's parser takes).
BODY_TEXT = [("NUL", '"a\\u0000b"'), ("a control character", '"a\\u0001"'), ("empty", '""'),
             ("over-long", f'"{OVER_LONG}"'), ("a lone surrogate", '"\\ud800"')]
BODY_INTEGER = [("negative", "-1"), ("huge", "100000000000000000000"), ("non-ASCII digits", '"\\u00b2"'),
                ("a fraction", "1.5"), ("NaN", "NaN")]
BODY_NUMBER = [("negative", "-1"), ("NaN", "NaN"), ("Infinity", "Infinity"), ("overflow", "1e400"),
               ("huge", "1e300"), ("non-ASCII digits", '"\\u00b2"')]


def _kinds(schema: dict[str, Any], spec: dict[str, Any]) -> set[str]:
    """The JSON types a parameter's schema admits (null and references resolved)."""
    if "$ref" in schema:
        return _kinds(spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], spec)
    if "anyOf" in schema or "oneOf" in schema:
        return set().union(*(_kinds(s, spec) for s in schema.get("anyOf", schema.get("oneOf", []))))
    if "enum" in schema:
        return {"string"}
    kind = schema.get("type")
    if kind == "array":
        return {f"array of {k}" for k in _kinds(schema.get("items", {}), spec)}
    return {kind} if kind and kind != "null" else set()


def _body_fields(operation: dict[str, Any], spec: dict[str, Any]) -> dict[str, set[str]]:
    """Each top-level field of the operation's JSON body and its kinds (the union of every
    model a submission may be checked by)."""
    schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return {}
    models = [schema] if "$ref" in schema else schema.get("oneOf", [schema])
    fields: dict[str, set[str]] = {}
    for model in models:
        resolved = spec["components"]["schemas"][model["$ref"].rsplit("/", 1)[1]]
        for name, field_schema in resolved.get("properties", {}).items():
            fields.setdefault(name, set()).update(_kinds(field_schema, spec))
    return fields


def http_cases(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, the request's parts, whether it must be refused) for every hostile value of
    every parameter of every operation."""
    cases: list[tuple[str, dict[str, Any], bool]] = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            method = method.upper()
            params = operation.get("parameters", [])
            missing = [p["name"] for p in params if p["in"] == "path" and p["name"] not in PATH_VALUES]
            assert not missing, f"{method} {path}: add a valid value for {missing} to PATH_VALUES"
            fields = _body_fields(operation, spec)
            assert not fields or (method, path) in BODIES, f"{method} {path}: add a valid body to BODIES"
            base = {"method": method, "path": path, "path_values": dict(PATH_VALUES), "query": {},
                    "headers": {}, "body": BODIES.get((method, path))}
            for param in params:
                cases += _param_cases(base, param, _kinds(param["schema"], spec))
            for field, kinds in fields.items():
                refused = (method, path, field) not in ANSWERED_IN_A_2XX
                for label, raw in _body_values(kinds):
                    name = f"{method} {path} body.{field}: {label}"
                    cases.append((name, {**base, "body_override": (field, raw)}, refused))
    return cases


def _param_cases(base: dict[str, Any], param: dict[str, Any],
                 kinds: set[str]) -> list[tuple[str, dict[str, Any], bool]]:
    where, name = param["in"], param["name"]
    label_of = f"{base['method']} {base['path']} {where}.{name}"
    out = []
    if where == "header":
        for label, raw in HEADER_TEXT:
            out.append((f"{label_of}: {label}", {**base, "headers": {name: raw}}, True))
        return out
    values: list[tuple[str, str, bool]] = []
    if {"string", "array of string"} & kinds:
        values += [*URL_TEXT, ("empty", "", True)]
        if name == "after":  # a page's cursor
            values += [(label, cursor, True) for label, cursor in CURSORS]
    if {"integer", "array of integer"} & kinds:
        values += [(label, raw, True) for label, raw in URL_INTEGER]
    if "number" in kinds:
        values += [(label, raw, True) for label, raw in URL_NUMBER]
    for label, raw, refused in values:
        # An empty path segment is another path (a 404, or a redirect to the route without it).
        refused = refused and not (where == "path" and raw == "")
        if where == "path":
            part = {"path_values": {**base["path_values"], name: raw}}
        else:
            part = {"query": {name: raw}}
        out.append((f"{label_of}: {label}", {**base, **part}, refused))
    return out


def _body_values(kinds: set[str]) -> list[tuple[str, str]]:
    values: list[tuple[str, str]] = []
    if "string" in kinds:
        values += BODY_TEXT
    if "integer" in kinds:
        values += BODY_INTEGER
    if "number" in kinds and "integer" not in kinds:
        values += BODY_NUMBER
    for kind in sorted(kinds):
        if kind.startswith("array of "):
            inner = {"string": BODY_TEXT, "integer": BODY_INTEGER, "number": BODY_NUMBER}.get(kind[9:], [])
            values += [(f"an item {label}", f"[{raw}]") for label, raw in inner]
    return values


def _request(case: dict[str, Any], run_id: int) -> dict[str, Any]:
    values = {k: v.replace("{run}", str(run_id)) for k, v in case["path_values"].items()}
    url = case["path"].format(**values)
    if case["query"]:
        url += "?" + "&".join(f"{k}={v}" for k, v in case["query"].items())
    headers = {"Authorization": f"Bearer {OPERATOR}", **case["headers"]}
    body = case["body"]
    if "body_override" in case:
        field, raw = case["body_override"]
        rest = json.dumps({k: v for k, v in (body or {}).items() if k != field})
        content = rest[:-1] + (", " if rest != "{}" else "") + f'"{field}": {raw}}}'
    else:
        content = None if body is None else json.dumps(body)
    if content is not None:
        headers["Content-Type"] = "application/json"
    return {"method": case["method"], "url": url, "headers": headers,
            "content": None if content is None else content.encode("utf-8", "surrogatepass")}


async def store_state(app: rw.App) -> tuple[Any, ...]:
    """What a refused request must leave as it was: every run's state and log length, every
    thread, schedule and open question."""
    runs = [(r.id, r.state, r.attempt, r.last_seq, r.key) for r in await app.list_runs(limit=1000)]
    threads = [(t.tenant, t.thread, t.deleted, t.runs) for t in await app.list_threads(include_deleted=True)]
    schedules = [(s.name, s.paused, s.next_fire_at) for s in await app.list_schedules()]
    return runs, threads, schedules, len(await app.questions())


async def test_every_route_refuses_every_hostile_value_with_a_4xx_problem(store_url: str) -> None:
    from runwright.server import Auth
    from runwright.server._factory import create_server

    async with client(store_url) as app:
        seeded = await app.tenant("acme").submit("record", n=1, thread="t", delay_s=3600)
        await app.save_schedule(app.schedule_spec("nightly", cron="0 3 * * *", task="record", args={"n": 1},
                                                  tz="UTC", misfire="skip", catch_up_limit=10, queue=None,
                                                  priority=None))
        before = await store_state(app)
        api = create_server(app, Auth({"tenant-token": "acme"}, operators=frozenset({OPERATOR})))
        cases = http_cases(api.openapi())
        assert len(cases) > 300  # every operation's parameters, each with every hostile value
        transport = httpx.ASGITransport(api, raise_app_exceptions=False)  # a 500 is a row that failed
        failures = []
        async with httpx.AsyncClient(transport=transport, base_url="http://runwright") as http:
            for name, case, must_refuse in cases:
                request = _request(case, seeded.id)
                try:
                    async with asyncio.timeout(20):  # a stream that opened would never end
                        answer = await http.request(**request)
                except TimeoutError:
                    failures.append(f"{name}: no answer (a stream opened?)")
                    continue
                problem = answer.headers.get("content-type") == "application/problem+json"
                if answer.status_code >= 500 or (answer.status_code >= 400 and not problem):
                    failures.append(f"{name}: {answer.status_code} {answer.text[:160]}")
                elif must_refuse and not 400 <= answer.status_code < 500:
                    failures.append(f"{name}: accepted ({answer.status_code} {answer.text[:160]})")
        assert not failures, f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures)
        assert await store_state(app) == before


# -- every command, every option and argument --------------------------------------------
#
# In process (`runwright.cli._main.run`), each command of the tree with every hostile value
# of its kind in one option or argument, the others valid: one line on stderr that names
# the option, exit 2, before any store is opened (the URL names a database that does not
# exist: reaching it would be exit 4, and would not create it either).

# Valid positional arguments of each command that takes some (each hostile value replaces one).
POSITIONAL: dict[tuple[str, ...], list[str]] = {
    ("worker",): [APP_SPEC], ("serve",): [APP_SPEC], ("submit",): [APP_SPEC, "record"],
    ("show",): ["1"], ("events",): ["1"], ("follow",): ["1"], ("cancel",): ["1"], ("retry",): ["1"],
    ("pause",): ["1"], ("resume",): ["1"],
    ("schedules",): ["pause", "nightly"], ("questions",): ["1"], ("answer",): ["1", "0", '"yes"'],
    ("thread", "show"): ["t"], ("thread", "cancel"): ["t"], ("thread", "follow"): ["t"],
    ("fleet", "broadcast"): ["ping"],
    ("mcp",): [APP_SPEC], ("signal",): ["1", "payment", "1"], ("signals",): ["1"],
    ("query",): ["1", "stage", "{}"],
    ("patches",): ["lookup-v2"], ("replay",): [APP_SPEC], ("export-runs",): ["runs.jsonl"],
    ("bulk",): ["retry"], ("fork",): ["1"],
    ("publish",): ["doc.processed", "{}"],
    ("limits",): ["set", "crm", "3"],
}
INTEGER_TEXT = ["-1", "99999999999999999999", "²", "٣", "1e20", "inf", "nan", "", "0x10", " "]
NUMBER_TEXT = ["-1", "inf", "-inf", "nan", "1e400", "1e20", "١", "²", "", "1_0"]


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            found += _commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


def cli_cases() -> list[tuple[str, list[str], str]]:
    """(name, argv, the name the error must give) for every hostile value of every
    parameter of every command."""
    from runwright.cli._main import command
    from runwright.cli._params import Integer, Number, Text

    cases = []
    for path, command_ in _commands(command()):
        arguments = [p for p in command_.params if p.param_type_name == "argument"]
        assert not arguments or path in POSITIONAL, f"runwright {' '.join(path)}: add its arguments here"
        positional = POSITIONAL.get(path, [])
        for param in command_.params:
            if getattr(param, "is_flag", False) or param.name == "help":
                continue
            kind = param.type
            assert isinstance(kind, (Integer, Number, Text)), (
                f"runwright {' '.join(path)} {param.name}: read it with a type of runwright.cli._params")
            values = (INTEGER_TEXT if isinstance(kind, Integer) else NUMBER_TEXT if isinstance(kind, Number)
                      else _text_values(kind.max_chars))
            for value in values:
                if param.param_type_name == "option":
                    flag = max(param.opts, key=len)
                    argv = [*path, flag, value, "--", *positional]
                    what = flag
                else:
                    index = arguments.index(param)
                    given = [*positional]
                    given[index:index + 1] = [value]
                    argv = [*path, "--", *given]
                    what = param.human_readable_name
                cases.append((f"{' '.join(path)} {what} {value[:12]!r}", argv, what))
    return cases


def _text_values(max_chars: int) -> list[str]:
    over_long = ["x" * (max_chars + 1)] if max_chars < 10_000 else []  # not 64 MiB of JSON
    return ["", "a\x00b", "a\udcff", *over_long]


def test_every_command_refuses_every_hostile_value_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from runwright.cli._main import run

    database = tmp_path / "never.db"
    monkeypatch.setenv("RUNWRIGHT_URL", f"sqlite:///{database}")
    monkeypatch.chdir(tmp_path)  # a command that fell through to the default URL makes nothing here
    cases = cli_cases()
    assert len(cases) > 300
    failures = []
    for name, argv, what in cases:
        code = run(argv)
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        if code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or what not in lines[0] or out:
            failures.append(f"{name}: exit {code}, stdout {out[:80]!r}, stderr {err[:300]!r}")
    assert not failures, f"{len(failures)} of {len(cases)}:\n" + "\n".join(failures)
    assert not database.exists() and not (tmp_path / "runwright.db").exists()


# Values that only the library can judge (what a thread's name may be, whether it exists),
# through the command line on every backend: one line, the documented code, nothing written.
LIBRARY_REFUSALS: list[tuple[list[str], int, str]] = [
    (["thread", "show", "NOSUCH"], 5, "error: ThreadNotFound: thread 'NOSUCH' does not exist"),
    (["thread", "show", "t", "--tenant", "nobody"], 5, "error: ThreadNotFound: thread 't' does not exist"),
    (["thread", "show", "a\x01"], 2, "error: InvalidInput: thread must be a name without control characters"),
    (["thread", "show", "t", "--tenant", "a\x1b[1m"], 2, "error: InvalidInput: tenant must be a name"),
    (["thread", "cancel", "a\x7f"], 2, "error: InvalidInput: thread must be a name without control"),
    (["thread", "follow", "x" * 257], 2, "error: InvalidInput: thread must be a non-empty string of at most"),
    (["thread", "list", "--tenant", "a\n"], 2, "error: InvalidInput: tenant must be a name without control"),
    (["runs", "--thread", "a\x01"], 2, "error: InvalidInput: thread must be a name without control"),
    (["runs", "--queue", "q\x00"], 2, "error: InvalidInput: --queue must be text without NUL"),
    (["runs", "--task", "x" * 201], 2, "error: InvalidInput: task must be a non-empty string of at most 200"),
    (["answer", "1", "0", '"yes"', "--by", " "], 2, "error: InvalidInput: --by names who answers"),
    (["schedules", "pause", "a\x01"], 2, "error: InvalidInput: schedule name must be a name without control"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"},
                                      "key": "a\x00"})],
     2, "error: InvalidInput: key must be text without NUL"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"},
                                      "thread": "a\ud800"})],
     2, "error: InvalidInput: thread must be text without NUL or lone surrogates"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"}}),
      "--on-busy", "enqueue"],
     2, "error: InvalidInput: on_busy='enqueue' says what to do when a thread has an open run"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"}}),
      "--thread", "t", "--on-busy", "later"],
     2, "error: InvalidInput: on_busy must be one of reject, enqueue, interrupt, rollback, steer, "
        "got 'later'"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"}}),
      "--thread", "a\x01"],
     2, "error: InvalidInput: thread must be a name without control characters"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"}}),
      "--on-conflict", "ignore"],
     2, "error: InvalidInput: on_conflict must be one of reject, return, got 'ignore'"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"},
                                      "on_conflict": ["return"]})],
     2, "error: InvalidInput: on_conflict must be one of reject, return, got ['return']"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"},
                                      "delay_s": 1e300})],
     2, "error: InvalidTime: delay_s must be >= 0 and <= 1e+09 seconds"),
    (["submit", "--json", json.dumps({"task": "webhook", "args": {"url": "http://example.com"},
                                      "run_at": -1})],
     2, "error: InvalidTime: run_at must be epoch seconds in 0..1e+11"),
    # Run 1 is of a thread; run 2 is due later, and has journaled nothing yet.
    (["fork", "2", "--from-step", "1"], 2,
     "error: InvalidInput: from_step=1 is past the end of run 2's journal (it holds no step yet: "
     "fork from 0)"),
    (["fork", "2", "--from-step", "charge"], 2,
     "error: InvalidInput: from_step='charge': run 2 journaled no step of that name"),
    (["fork", "2", "--from-step", "0", "--args", "[1]"], 2,
     "error: InvalidInput: --args is a JSON object of the arguments to change, got [1]"),
    (["fork", "2", "--from-step", "0", "--key", "a\x01"], 2, "error: InvalidInput: key must be a name"),
    (["fork", "1", "--from-step", "0"], 2, "error: InvalidInput: run 1 is a run of thread 't'"),
    (["fork", "99", "--from-step", "0"], 5, "error: RunNotFound: run 99 not found"),
]


def test_the_command_line_refuses_what_the_library_refuses(store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from runwright.cli._main import run

    async def seed() -> tuple[Any, ...]:
        async with client(store_url) as app:
            await app.submit("record", n=1, thread="t", delay_s=3600)
            await app.submit("record", n=2, delay_s=3600)
            return await store_state(app)

    async def state() -> tuple[Any, ...]:
        async with client(store_url) as app:
            return await store_state(app)

    before = asyncio.run(seed())
    monkeypatch.setenv("RUNWRIGHT_URL", store_url)
    failures = []
    for argv, code, first_line in LIBRARY_REFUSALS:
        given = run(argv)
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        if given != code or len(lines) != 1 or not lines[0].startswith(first_line) or "Traceback" in err:
            failures.append(f"{argv!r}: exit {given}, stderr {err[:300]!r}")
    assert not failures, "\n".join(failures)
    assert asyncio.run(state()) == before
