"""Bad input, face by face: the same inputs through the library, the `runwright` command
and HTTP, each refused with its documented answer (an error type, an exit code, a
status) and one clear line, with nothing written. Real stores, real processes.

CLI exit codes (README): 2 a bad input or setting, 3 the store unreachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx
import pytest

import runwright as rw
from runwright.serde import MAX_DEPTH
from runwright.store.params import RunCountParams

from ..api.test_api import OPERATOR_TOKEN, server  # noqa: F401 (fixture)
from ..process.harness import APP_SPEC, ROOT, client

DEEP = 100_000
TOO_DEEP = f"is nested deeper than the limit of {MAX_DEPTH} levels"
LIMIT_REFUSED = "limit must be an integer in 1..2147483647, got -1"
QUEUE_REFUSED = "queue must be a non-empty string of at most 200 characters, got 5"


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
    ("arguments 100,000 deep", lambda app: app.submit("record", n=nested(DEEP)),
     rw.SerializationError, f"arguments of task 'record' {TOO_DEEP}"),
    ("arguments one level too deep", lambda app: app.submit("record", n=nested(MAX_DEPTH)),
     rw.SerializationError, f"arguments of task 'record' {TOO_DEEP}"),
    ("a deep item of many", lambda app: app.submit_many("record", [{"n": 1}, {"n": nested(DEEP)}]),
     rw.SerializationError, f"item 1: arguments of task 'record' {TOO_DEEP}"),
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
     rw.InvalidInput, "queue must be a string, got 5"),
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
    ("a queue that is not a string in --json",
     lambda _: ["submit", APP_SPEC, "--json", json.dumps({"task": "record", "args": {"n": 1}, "queue": 5})],
     2, f"error: InvalidInput: {QUEUE_REFUSED}"),
    ("a priority that is not a number in --json",
     lambda _: ["submit", APP_SPEC, "--json", json.dumps({"task": "record", "args": {"n": 1},
                                                          "priority": "high"})],
     2, "error: InvalidInput: priority must be an int in 0..32767"),
    ("runs --limit -1", lambda _: ["runs", "--limit", "-1"], 2, f"error: InvalidInput: {LIMIT_REFUSED}"),
    ("dead --limit -1", lambda _: ["dead", "--limit", "-1"], 2, f"error: InvalidInput: {LIMIT_REFUSED}"),
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


# At start, before any store is used: the same answers whatever the backend.
STARTS: list[tuple[str, list[str], int, str]] = [
    ("serve, PostgreSQL unreachable",
     ["serve", APP_SPEC, "--port", "9", "--url", "postgresql://postgres@127.0.0.1:1/nope"],
     3, "error: StoreUnreachable: postgresql: cannot connect to postgresql://postgres@127.0.0.1:1/nope"),
    ("serve, Redis unreachable", ["serve", APP_SPEC, "--port", "9", "--url", "redis://127.0.0.1:1/0"],
     3, "error: StoreUnreachable: redis: cannot connect to redis://127.0.0.1:1/0"),
    ("a worker pool of an unknown module", ["worker", "no_such_module:app", "-p", "2"],
     2, "failed to start 3 times in a row (exit code 2): ConfigError: cannot import 'no_such_module'"),
]


@pytest.mark.process
@pytest.mark.parametrize("args, code, message", [row[1:] for row in STARTS], ids=[row[0] for row in STARTS])
def test_a_command_that_cannot_start_says_why_in_one_line(args, code, message) -> None:
    """The last line is the error (a pool's workers logged their own tries before it)."""
    done = runwright(*args, url="sqlite:///unused.db")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == code, done.stderr
    assert last.startswith("error: ") and message in last, done.stderr[-500:]
    assert "Traceback" not in done.stderr


# -- HTTP ------------------------------------------------------------------------------

# Each row: method, path, JSON body (or raw text), status, the start of the problem's detail.
HTTP: list[tuple[str, str, str, Any, int, str]] = [
    ("a body 100,000 deep", "POST", "/runs",
     '{"task": "record", "args": {"n": ' + nested_text(DEEP) + "}}",
     422, f"the request body {TOO_DEEP}"),
    ("arguments one level too deep", "POST", "/runs",
     '{"task": "record", "args": {"n": ' + nested_text(MAX_DEPTH) + "}}",
     422, f"arguments of task 'record' {TOO_DEEP}"),
    ("a queue that is not a string", "POST", "/runs",
     json.dumps({"task": "record", "args": {"n": 1}, "queue": 5}),
     422, "body.queue: Input should be a valid string"),
    ("an empty queue", "POST", "/runs", json.dumps({"task": "record", "args": {"n": 1}, "queue": ""}),
     422, "queue must be a non-empty string"),
    ("a negative limit", "GET", "/runs?limit=-1", None, 422, "query.limit: Input should be greater than"),
    ("a negative dead-letter limit", "GET", "/dead?limit=-1", None, 422,
     "query.limit: Input should be greater than"),
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
