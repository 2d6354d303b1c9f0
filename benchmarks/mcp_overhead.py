"""MCP tool call overhead: what a durable call of an MCP server's tool by a runwright agent
costs beyond the same call made with a plain `ClientSession`, on the embedded default
(SQLite), against the test MCP server over stdio and a model that answers at once.

    cd /work/main && .venv/bin/python -m benchmarks.mcp_overhead [--calls 100] [--rounds 5]

Plain: `session.call_tool("lookup", ...)` in a loop, one after the other. Durable: one
agent run whose model asks for `--calls` calls of the tool in one turn (each a journaled
step, read-only so idempotent: its key rides in `_meta`), minus a run of one call (the
same two model requests); per call, the difference over `--calls - 1`. The same for the
destructive `cancel_order` (at most once: a started mark journaled first, and a ping that
proves the connection alive before the request goes out). Medians of `--rounds`. It
prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import runwright as rw
from runwright.integrations.mcp import MCPServer
from tests.agents.scripted_openai import Reply, ScriptedOpenAI, call, tool_results
from tests.integration.conftest import running_worker

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, "-m", "tests.integrations.mcp_servers", "stdio"]


async def plain(calls: int) -> float:
    """Seconds per call of a plain ClientSession, its connection open already."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("lookup", {"sku": "warm"})
        began = time.perf_counter()
        for index in range(calls):
            await session.call_tool("lookup", {"sku": f"s{index}"})
        return (time.perf_counter() - began) / calls


def script_of(tool: str, arguments: Any) -> Any:
    def script(body: dict[str, Any], index: int) -> Reply:
        if tool_results(body):
            return Reply(content="done")
        count = int(next(m["content"] for m in body["messages"] if m["role"] == "user"))
        return Reply(tool_calls=[call(tool, arguments(i), f"c{i}") for i in range(count)])
    return script


async def durable(tool: str, arguments: Any, calls: int, rounds: int) -> list[float]:
    """Seconds per durable call, one figure per round."""
    figures = []
    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAI(script_of(tool, arguments)) as model:
        os.environ["OPENAI_BASE_URL"] = model.base_url
        os.environ.setdefault("OPENAI_API_KEY", "bench")
        app = rw.App(f"sqlite:///{tmp}/rw.db")
        inventory = MCPServer.stdio(SERVER[0], *SERVER[1:], cwd=str(ROOT), name="inventory")
        app.agent("clerk", model="openai:bench-instant", tools=[inventory], max_turns=3)
        await app.open()
        try:
            async with running_worker(app, poll_s=0.01):
                await (await app.submit("clerk", input="1")).result(timeout_s=60)  # connected, listed
                for _ in range(rounds):
                    spent = {}
                    for count in (1, calls):
                        began = time.perf_counter()
                        await (await app.submit("clerk", input=str(count))).result(timeout_s=600)
                        spent[count] = time.perf_counter() - began
                    figures.append((spent[calls] - spent[1]) / (calls - 1))
        finally:
            await app.close()
    return figures


async def main(calls: int, rounds: int) -> None:
    plain_s = statistics.median([await plain(calls) for _ in range(rounds)])
    idempotent = await durable("lookup", lambda i: {"sku": f"s{i}"}, calls, rounds)
    at_most_once = await durable("cancel_order", lambda i: {"order": f"o{i}"}, calls, rounds)
    rows = [("plain ClientSession.call_tool", plain_s),
            ("durable, idempotent (lookup)", statistics.median(idempotent)),
            ("durable, at most once (cancel_order)", statistics.median(at_most_once))]
    per_call_ms = {name: round(seconds * 1e3, 3) for name, seconds in rows}
    print(json.dumps({"calls": calls, "rounds": rounds, "per_call_ms": per_call_ms}))
    for name, seconds in rows:
        extra = "" if name.startswith("plain") else f"  (+{(seconds - plain_s) * 1e3:.2f} ms over plain)"
        print(f"{name:<40} {seconds * 1e3:8.2f} ms per call{extra}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.calls < 2 or args.rounds < 1:
        parser.error("--calls must be >= 2 and --rounds >= 1")
    asyncio.run(main(args.calls, args.rounds))
