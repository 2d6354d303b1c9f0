"""MCP servers' tools in runwright's own agents: real MCP servers (the `mcp` SDK's, see
mcp_servers.py) over stdio and streamable HTTP, a real worker, and the scripted model
server. Every call the server executes is in its ledger (`tool pid key detail`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.integrations import delivery_from_annotations
from runwright.integrations.mcp import IDEMPOTENCY_META_KEY, MCPServer

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
from ..integration.conftest import running_worker
from ..ports import free_port
from .mcp_harness import ROOT, SERVER_MODULE, executed, start_http_server

BROKEN = "Error executing tool broken: the warehouse is closed: holiday"  # the server's error text


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[rw.App]:
    app = rw.App(f"sqlite:///{tmp_path / 'rw.db'}")
    await app.open()
    yield app
    await app.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "mcp-ledger.log"


def stdio_server(ledger: Path, **options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, "-m", SERVER_MODULE, "stdio", env={"MCP_LEDGER": str(ledger)},
                           cwd=str(ROOT), name="inventory", **options)


@pytest.fixture
def http_server(ledger: Path) -> Iterator[str]:
    port = free_port()
    process = start_http_server(port, {"MCP_LEDGER": str(ledger)})
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def model_at(server: ScriptedOpenAI) -> str:
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ.setdefault("OPENAI_API_KEY", "test-key")
    return "openai:gpt-4o-mini"


def all_four_then_report(body: dict[str, Any], index: int) -> Reply:
    """One turn calling the read-only, idempotent, destructive and failing tools; then the
    results, as JSON."""
    if last_role(body) == "user":
        return Reply(tool_calls=[call("lookup", {"sku": "A1"}, "look"),
                                 call("reserve", {"sku": "A1", "quantity": 2}, "res"),
                                 call("cancel_order", {"order": "o-7"}, "can"),
                                 call("broken", {"reason": "holiday"}, "bad"),
                                 call("lookup", {"sku": 3}, "typed"),
                                 call("audit", {"period": "2026"}, "proto")])
    return Reply(content=json.dumps(tool_results(body)))


async def run_all_four(app: rw.App, inventory: MCPServer,
                       ledger: Path) -> tuple[dict[str, str], Any, Any]:
    with ScriptedOpenAI(all_four_then_report) as model:
        app.agent("clerk", model=model_at(model), tools=[inventory], retries=0)
        async with running_worker(app):
            handle = await app.submit("clerk", input="tidy up order o-7")
            answer = json.loads(await handle.result(timeout_s=60))
    return answer, handle, model


async def test_stdio_tools_with_deliveries_from_their_annotations(app: rw.App, ledger: Path) -> None:
    inventory = stdio_server(ledger)
    answer, handle, model = await run_all_four(app, inventory, ledger)

    # The model saw each tool's MCP name, description and input schema, as listed.
    first = model.requests[0]
    seen = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert set(seen) == {"lookup", "reserve", "cancel_order", "broken", "audit", "server_pid"}
    assert seen["lookup"]["description"] == "Look up a product's stock by its SKU."
    assert seen["reserve"]["parameters"]["properties"]["quantity"]["type"] == "integer"
    assert seen["reserve"]["parameters"]["required"] == ["sku", "quantity"]

    # Deliveries from annotations: read-only and idempotent get the key in _meta, the
    # destructive one none (at most once).
    definitions = {d["name"]: d for d in await inventory.definitions()}
    assert {name: inventory.tool(d).delivery for name, d in definitions.items()} == {
        "lookup": "idempotent", "reserve": "idempotent", "cancel_order": "at_most_once",
        "broken": "idempotent", "audit": "idempotent", "server_pid": "idempotent"}
    assert delivery_from_annotations(definitions["cancel_order"]["annotations"]) == "at_most_once"
    steps = await app.store.step_list(handle.id)
    position: dict[str, int] = {}
    for step in steps:  # each tool's first call
        position.setdefault(step.name, step.position)
    (lookup,) = executed(ledger, "lookup")
    assert lookup[2] == f"{handle.id}:{position['tool:lookup']}"
    (reserve,) = executed(ledger, "reserve")
    assert reserve[2] == f"{handle.id}:{position['tool:reserve']}"
    (cancel,) = executed(ledger, "cancel_order")
    assert cancel[2] == "-" and cancel[3] == "o-7"

    # Text and structured content become the result; an error result reaches the model.
    assert answer["look"] == "A1: 7 in stock"  # the text content
    assert json.loads(answer["res"]) == {"sku": "A1", "reserved": 2}
    assert json.loads(answer["bad"]) == {"error": BROKEN}
    # A protocol error (a JSON-RPC error response) too, and is not made again.
    assert json.loads(answer["proto"]) == {
        "error": "MCP server 'inventory' refused the call: MCPError: no audit for 2026"}
    assert len(executed(ledger, "audit")) == 1
    # Arguments are checked against the tool's input schema before any call.
    assert "argument 'sku': 3 is not of type 'string'" in json.loads(answer["typed"])["error"]
    assert len(executed(ledger, "lookup")) == 1

    # The tools the model saw are journaled with its step: a replay calls the same ones.
    (first_model, *_) = [s for s in steps if s.name == "model"]
    offered = json.loads(first_model.result)["offered"]
    assert {o["tool"]["name"] for o in offered} == set(seen)
    assert all(o["toolset"] == "inventory" for o in offered)


async def test_http_tools_with_an_override_and_the_key_in_meta(app: rw.App, ledger: Path,
                                                               http_server: str) -> None:
    offered = ["lookup", "reserve", "cancel_order", "broken", "audit"]  # not server_pid
    inventory = MCPServer.http(http_server, name="inventory", deliveries={"lookup": "at_least_once"},
                               only=offered)
    answer, handle, model = await run_all_four(app, inventory, ledger)
    assert sorted(t["function"]["name"] for t in model.requests[0]["tools"]) == sorted(offered)
    steps: dict[str, int] = {}
    for step in await app.store.step_list(handle.id):
        steps.setdefault(step.name, step.position)
    (lookup,) = executed(ledger, "lookup")
    assert lookup[2] == "-", "the user's at_least_once wins over the read-only hint: no key"
    (reserve,) = executed(ledger, "reserve")
    assert reserve[2] == f"{handle.id}:{steps['tool:reserve']}"
    assert len(executed(ledger, "cancel_order")) == 1
    assert json.loads(answer["res"]) == {"sku": "A1", "reserved": 2}
    assert json.loads(answer["bad"]) == {"error": BROKEN}
    assert IDEMPOTENCY_META_KEY == "runwright/idempotency_key"


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # reaped, or being reaped as it is read
        return True


async def test_a_killed_stdio_server_is_opened_again_and_the_run_completes(app: rw.App, ledger: Path) -> None:
    """The model asks for the server's pid, the test SIGKILLs that server, then the model
    asks for a read-only and a destructive call: both run on a new server process."""

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call("server_pid", {}, "pid")])
        if "look" not in results:
            pid = int(results["pid"])
            with contextlib.suppress(ProcessLookupError):  # a request retried: killed already
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not process_gone(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            return Reply(tool_calls=[call("lookup", {"sku": "B2"}, "look"),
                                     call("cancel_order", {"order": "o-9"}, "can")])
        return Reply(content=json.dumps(results))

    inventory = stdio_server(ledger)
    with ScriptedOpenAI(script) as model:
        app.agent("clerk", model=model_at(model), tools=[inventory], retries=0)
        async with running_worker(app):
            handle = await app.submit("clerk", input="check B2")
            answer = json.loads(await handle.result(timeout_s=60))
    (first,) = executed(ledger, "server_pid")
    (lookup,) = executed(ledger, "lookup")
    (cancel,) = executed(ledger, "cancel_order")
    assert lookup[1] != first[1] and cancel[1] == lookup[1], "a new server process answered"
    assert answer["look"] == "B2: 7 in stock"
    assert "cancelled o-9" in answer["can"]


async def test_an_unreachable_server_is_an_error_result_not_a_crash(app: rw.App) -> None:
    """A server that went away after its tools were listed: the call's error reaches the
    model, the run goes on."""
    port = free_port()

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            process.kill()
            process.wait()
            return Reply(tool_calls=[call("reserve", {"sku": "C3", "quantity": 1}, "res")])
        return Reply(content=json.dumps(results))

    process = start_http_server(port, {})
    inventory = MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="inventory", timeout_s=5)
    try:
        with ScriptedOpenAI(script) as model:
            app.agent("clerk", model=model_at(model), tools=[inventory], retries=0)
            async with running_worker(app):
                handle = await app.submit("clerk", input="reserve C3")
                answer = json.loads(await handle.result(timeout_s=60))
    finally:
        process.kill()
    assert "could not be reached" in json.loads(answer["res"])["error"]


def test_misconfiguration_is_a_one_line_config_error() -> None:
    with pytest.raises(rw.ConfigError, match="delivery must be one of"):
        MCPServer.stdio("srv", deliveries={"x": "twice"})
    with pytest.raises(rw.ConfigError, match="url must be an http"):
        MCPServer.http("localhost:9")
    with pytest.raises(rw.ConfigError, match="command must be"):
        MCPServer.stdio("")


async def test_a_restarted_http_server_gets_a_new_session_and_the_run_completes(
        app: rw.App, ledger: Path) -> None:
    """The test restarts the HTTP server between two turns: the old session is unknown to
    the new process (404: the request was not served), so even the destructive call is
    made, once, on a new session."""
    port = free_port()
    servers = [start_http_server(port, {"MCP_LEDGER": str(ledger)})]

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call("server_pid", {}, "pid")])
        if "can" not in results:
            servers[0].kill()
            servers[0].wait()
            servers[0] = start_http_server(port, {"MCP_LEDGER": str(ledger)})
            return Reply(tool_calls=[call("cancel_order", {"order": "o-3"}, "can")])
        return Reply(content=json.dumps(results))

    inventory = MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="inventory")
    try:
        with ScriptedOpenAI(script) as model:
            app.agent("clerk", model=model_at(model), tools=[inventory], retries=0)
            async with running_worker(app):
                handle = await app.submit("clerk", input="cancel o-3")
                answer = json.loads(await handle.result(timeout_s=60))
    finally:
        servers[0].kill()
        servers[0].wait()
    (first,) = executed(ledger, "server_pid")
    (cancel,) = executed(ledger, "cancel_order")
    assert cancel[1] != first[1], "the new server process made the call"
    assert "cancelled o-3" in answer["can"]


async def test_a_worker_s_runs_share_one_session(app: rw.App, ledger: Path) -> None:
    """Five runs at once on one worker: one stdio server process serves every call."""

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            sku = next(m["content"] for m in body["messages"] if m["role"] == "user")
            return Reply(tool_calls=[call("lookup", {"sku": sku}, "look")])
        return Reply(content=results["look"])

    inventory = stdio_server(ledger)
    with ScriptedOpenAI(script) as model:
        app.agent("clerk", model=model_at(model), tools=[inventory], retries=0)
        async with running_worker(app):
            handles = [await app.submit("clerk", input=f"S{i}") for i in range(5)]
            answers = [await handle.result(timeout_s=60) for handle in handles]
    assert answers == [f"S{i}: 7 in stock" for i in range(5)]
    (pid,) = {int(line[1]) for line in executed(ledger, "lookup")}  # one server process
    assert not process_gone(pid)
    await app.close()  # as a worker process does when it stops: the session closes, the server exits
    assert process_gone(pid)


async def test_a_server_whose_tools_cannot_be_listed_fails_the_attempt(app: rw.App) -> None:
    """Nothing listens at the server's URL: the model call cannot be made with its tools,
    so the attempt fails (retries=0: the run), saying why; no model request went out."""
    port = free_port()
    inventory = MCPServer.http(f"http://127.0.0.1:{port}/mcp", name="inventory", timeout_s=5)
    with ScriptedOpenAI(all_four_then_report) as model:
        app.agent("clerk", model=model_at(model), tools=[inventory], retries=0)
        async with running_worker(app):
            handle = await app.submit("clerk", input="anything")
            with pytest.raises(rw.RunFailed, match="MCP server 'inventory' could not be reached"):
                await handle.result(timeout_s=60)
    assert model.requests == []
