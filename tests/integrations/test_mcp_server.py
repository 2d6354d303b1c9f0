"""`runwright mcp APP` driven by the mcp SDK's own client (ClientSession), over stdio (the
SDK starts the command) and streamable HTTP (`--http`), with a real worker process running
the runs on a SQLite store. Tenants come from RUNWRIGHT_TOKENS, as for the HTTP API."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from ..ports import free_port
from ..process.harness import WorkerFleet
from .mcp_harness import ROOT

APP_SPEC = "tests.integrations.mcp_face_app:app"
TOKENS = "tok-a=acme,tok-b=globex"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[str]:
    """A SQLite store with a worker of the app running on it."""
    url = f"sqlite:///{tmp_path / 'rw.db'}"
    subprocess.run([sys.executable, "-m", "runwright", "migrate", "--url", url], cwd=ROOT, check=True,
                   capture_output=True)
    fleet = WorkerFleet(url, tmp_path)
    fleet.start(app_spec=APP_SPEC)
    try:
        yield url
    finally:
        fleet.kill_all()
        print(fleet.dump_logs())


def child_env(**extra: str) -> dict[str, str]:
    return {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "RUNWRIGHT_TOKENS": TOKENS, **extra}


@asynccontextmanager
async def stdio_session(url: str, **env: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "runwright", "mcp", APP_SPEC, "--url", url],
                                   env=child_env(**env), cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def tool(session: ClientSession, name: str, **arguments: Any) -> Any:
    """The tool's structured result; an AssertionError with its text if it failed."""
    result = await session.call_tool(name, arguments)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content


async def refused(session: ClientSession, name: str, **arguments: Any) -> str:
    """The one-line text of a tool error."""
    result = await session.call_tool(name, arguments)
    assert result.is_error, result
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text and "Traceback" not in text, text
    return text


async def follow_to_the_end(session: ClientSession, run_id: int) -> list[dict[str, Any]]:
    events, after = [], 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        page = await tool(session, "follow_run", run_id=run_id, after=after, wait_s=5)
        events += page["events"]
        after = page["next_after"]
        if page["done"]:
            return events
    raise AssertionError(f"run {run_id} did not end")


async def test_over_stdio_submit_follow_answer_cancel_and_tenants(store: str) -> None:
    async with stdio_session(store, RUNWRIGHT_TOKEN="tok-a") as acme:
        names = {t.name for t in (await acme.list_tools()).tools}
        assert names == {"submit_run", "get_run", "follow_run", "list_runs", "read_thread", "list_questions",
                         "answer_question", "cancel_run", "retry_run"}

        # Submit a run and follow it to its end (a long poll, page by page).
        run = await tool(acme, "submit_run", task="double", args={"n": 21}, key="d-1")
        assert run["state"] in ("queued", "running", "succeeded")
        events = await follow_to_the_end(acme, run["id"])
        assert events and [e["seq"] for e in events] == sorted(e["seq"] for e in events)
        done = await tool(acme, "get_run", run_id=run["id"])
        assert done["state"] == "succeeded" and done["result"] == 42
        again = await tool(acme, "submit_run", task="double", args={"n": 21}, key="d-1")
        assert again["id"] == run["id"] and again["existed"] is True  # the key: the same run

        # A run asks a person; the answer wakes it.
        greet = await tool(acme, "submit_run", task="greet")
        deadline = time.monotonic() + 30
        while not (asked := (await tool(acme, "list_questions", run_id=greet["id"]))["items"]):
            assert time.monotonic() < deadline, "the run never asked"
            await follow_once(acme, greet["id"])
        (question,) = asked
        assert question["body"]["text"] == "Whom shall I greet?"
        # A long poll with nothing new: it waits wait_s, then says so (not done). Once the
        # run has parked: it opens its question and then parks, two writes (and two events).
        while (parked := await tool(acme, "get_run", run_id=greet["id"]))["state"] != "queued":
            assert time.monotonic() < deadline, f"the run never parked: {parked}"
            await follow_once(acme, greet["id"])
        seen = parked["last_seq"]
        began = time.monotonic()
        quiet = await tool(acme, "follow_run", run_id=greet["id"], after=seen, wait_s=0.5)
        assert quiet["events"] == [] and quiet["next_after"] == seen and quiet["done"] is False
        assert time.monotonic() - began >= 0.45
        answered = await tool(acme, "answer_question", run_id=greet["id"], question=question["id"],
                              value="ana", by="ana")
        assert answered["answered_by"] == "acme:ana"
        await follow_to_the_end(acme, greet["id"])
        assert (await tool(acme, "get_run", run_id=greet["id"]))["result"] == "hello ana"

        # Cancel a long run.
        crawl = await tool(acme, "submit_run", task="crawl")
        cancelled = await tool(acme, "cancel_run", run_id=crawl["id"])
        assert cancelled["state"] in ("cancelled", "running")
        await follow_to_the_end(acme, crawl["id"])
        assert (await tool(acme, "get_run", run_id=crawl["id"]))["state"] == "cancelled"

        listed = await tool(acme, "list_runs", task="double")
        assert [r["id"] for r in listed["items"]] == [run["id"]]

        # A dead run, retried: queued again with fresh attempts.
        failing = await tool(acme, "submit_run", task="always_fails")
        await follow_to_the_end(acme, failing["id"])
        assert (await tool(acme, "get_run", run_id=failing["id"]))["state"] == "dead"  # attempts exhausted
        assert (await tool(acme, "retry_run", run_id=failing["id"]))["state"] == "queued"
        assert "RunNotRetryable" in await refused(acme, "retry_run", run_id=run["id"])  # it succeeded

        # A thread: its runs' conversation (a task adds no messages; an agent would).
        await tool(acme, "submit_run", task="double", args={"n": 1}, thread="t-1")
        assert await tool(acme, "read_thread", thread="t-1") == {"thread": "t-1", "messages": []}

        # Bad input: one line each, never a traceback.
        assert "run_id" in await refused(acme, "get_run", run_id="seven")
        assert "UnknownTask" in await refused(acme, "submit_run", task="nope")
        assert "tenant" in await refused(acme, "submit_run", task="double", args={"n": 1}, tenant="globex")
        assert "argument 'n'" in await refused(acme, "submit_run", task="double", args={"n": "many"})
        assert "RunNotFound" in await refused(acme, "get_run", run_id=999_999)
        assert "operator" in await refused(acme, "list_runs", tenant="globex")

    # Another tenant's token: the first tenant's runs are not found, as over HTTP.
    async with stdio_session(store, RUNWRIGHT_TOKEN="tok-b") as globex:
        assert "RunNotFound" in await refused(globex, "get_run", run_id=run["id"])
        assert "RunNotFound" in await refused(globex, "cancel_run", run_id=crawl["id"])
        assert "RunNotFound" in await refused(globex, "follow_run", run_id=run["id"])
        assert (await tool(globex, "list_runs"))["items"] == []
        assert "ThreadNotFound" in await refused(globex, "read_thread", thread="t-1")

    # The operator (no token over stdio) sees every tenant's runs.
    async with stdio_session(store) as operator:
        listed = await tool(operator, "list_runs", tenant="acme")
        assert {run["id"], greet["id"], crawl["id"], failing["id"]} <= {r["id"] for r in listed["items"]}


async def follow_once(session: ClientSession, run_id: int) -> None:
    await tool(session, "follow_run", run_id=run_id, after=0, wait_s=0.5)


def test_a_token_no_tenant_holds_is_one_line_and_exit_2(store: str) -> None:
    done = subprocess.run([sys.executable, "-m", "runwright", "mcp", APP_SPEC, "--url", store], cwd=ROOT,
                          env={**os.environ, "RUNWRIGHT_TOKENS": TOKENS, "RUNWRIGHT_TOKEN": "forged"},
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done
    assert done.stderr.strip().count("\n") == 0 and "none of RUNWRIGHT_TOKENS" in done.stderr


@pytest.fixture
def http_mcp(store: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path / "mcp-http.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "runwright", "mcp", APP_SPEC, "--http",
                                "--port", str(port), "--url", store], cwd=ROOT,
                               env={**os.environ, "RUNWRIGHT_TOKENS": TOKENS}, stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while b"listening on" not in (tmp_path / "mcp-http.log").read_bytes():
            assert process.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "mcp-http.log").read_text()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_over_streamable_http_each_request_s_token_decides(http_mcp: str) -> None:
    async with http_session(http_mcp, "tok-a") as acme:
        run = await tool(acme, "submit_run", task="double", args={"n": 4})
        await follow_to_the_end(acme, run["id"])
        assert (await tool(acme, "get_run", run_id=run["id"]))["result"] == 8
        assert "invalid input" in await refused(acme, "follow_run", run_id=run["id"], wait_s=3600)
    async with http_session(http_mcp, "tok-b") as globex:
        assert "RunNotFound" in await refused(globex, "get_run", run_id=run["id"])
    # A token no tenant holds, or none: 401 before MCP sees the request.
    with pytest.raises(BaseException) as refusal:
        async with http_session(http_mcp, "forged"):
            pass
    assert "Server returned an error response" in repr(refusal.value)  # how the SDK's client says it
    import httpx

    for headers in ({"Authorization": "Bearer forged"}, {}):
        answer = httpx.post(http_mcp, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
