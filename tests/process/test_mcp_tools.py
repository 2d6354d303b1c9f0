"""MCP tool calls across a worker's death, with real worker processes on every backend
and a real MCP server (tests/integrations/mcp_servers.py, over streamable HTTP) whose
ledger holds every call it executed, even one whose caller was killed."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.runs import RunState

from ..agents.scripted_openai import Reply, call, tool_results
from ..integrations.mcp_harness import executed, start_http_server
from ..ports import free_port
from . import mcp_apps
from .agent_harness import AgentFleet
from .harness import WorkerFleet, WorkerProcess, owner_pid, wait_until

pytestmark = pytest.mark.process


class MCPFleet(AgentFleet):
    """Agent workers of tests.process.mcp_apps on the test's model and MCP server."""

    mcp_url = ""

    def start(self, lease_s: float | None = None, crash_points: str = "") -> WorkerProcess:  # type: ignore[override]
        assert self.model is not None, "serve_model() first: the worker needs its model"
        return WorkerFleet.start(self, lease_s=lease_s, app_spec="tests.process.mcp_apps:app", env={
            "OPENAI_BASE_URL": self.model.base_url, "OPENAI_API_KEY": "test", "MCP_URL": self.mcp_url})


@pytest.fixture
async def client(app: rw.App) -> AsyncIterator[rw.App]:
    app.tasks.update(mcp_apps.app.tasks)
    yield app


@pytest.fixture
def mcp_ledger(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The MCP server over HTTP; its `cancel_order` holds on its first execution."""
    ledger = tmp_path / "mcp-ledger.log"
    port = free_port()
    process = start_http_server(port, {"MCP_LEDGER": str(ledger),
                                       "MCP_HOLD_FIRST": str(tmp_path / "held-cancel")})
    try:
        yield f"http://127.0.0.1:{port}/mcp", ledger
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def workers(store_url: str, tmp_path: Path, mcp_ledger: tuple[str, Path]) -> Iterator[MCPFleet]:
    fleet = MCPFleet(store_url, tmp_path)
    fleet.mcp_url = mcp_ledger[0]
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.dump_logs())  # captured by pytest, shown only when the test failed


def reserve_then_cancel(body: dict[str, Any], index: int) -> Reply:
    """One turn: reserve (idempotent: read-only hint), then cancel the order (destructive:
    at most once); then the results, as JSON."""
    results = tool_results(body)
    if not results:
        return Reply(tool_calls=[call("reserve", {"sku": "A1", "quantity": 2}, "res"),
                                 call("cancel_order", {"order": "o-7"}, "can")])
    return Reply(content=json.dumps(results))


async def test_sigkill_after_a_completed_mcp_call_and_inside_a_destructive_one(
        client: rw.App, workers: MCPFleet, mcp_ledger: tuple[str, Path]) -> None:
    """SIGKILL the worker while the MCP server executes its at-most-once `cancel_order`,
    after `reserve` completed: the other worker takes the run over, makes neither call
    again, and tells the model cancel_order's outcome is unknown."""
    _, ledger = mcp_ledger
    model = workers.serve_model(reserve_then_cancel)
    workers.start()
    workers.start()
    handle = await client.submit("clerk", input="cancel o-7")
    await wait_until(lambda: executed(ledger, "cancel_order"), "the server executes cancel_order")
    at_kill = await handle.refresh()
    assert at_kill.state is RunState.RUNNING
    victim = workers.by_pid(await owner_pid(client, at_kill))
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL

    async def ended() -> Any:
        run = await handle.refresh()
        return run if run.done else None

    run = await wait_until(ended, "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, f"the run ended {run.state.value}: {run.error}"
    assert run.recoveries >= 1 and run.fence > at_kill.fence, "taken over, under a new claim"
    (reserve,) = executed(ledger, "reserve")  # completed before the kill: not made again
    steps = {s.name: s.position for s in await client.store.step_list(handle.id)}
    assert reserve[2] == f"{handle.id}:{steps['tool:reserve']}"  # its stable key, in the call's _meta
    assert len(executed(ledger, "cancel_order")) == 1, "the destructive call was never repeated"
    answer = json.loads(await handle.result(timeout_s=5))
    assert json.loads(answer["res"]) == {"sku": "A1", "reserved": 2}
    outcome = json.loads(answer["can"])
    assert outcome["error"] == "ToolOutcomeUnknown", outcome
    assert json.loads(tool_results(model.requests[-1])["can"])["error"] == "ToolOutcomeUnknown"
