"""A real MCP server (the `mcp` SDK's MCPServer, once FastMCP) for the tests, run as
`python -m tests.integrations.mcp_servers stdio` or `... http PORT`.

Its tools carry the annotations a delivery is chosen from: `lookup` read-only, `reserve`
idempotent, `cancel_order` destructive. Every execution appends a ledger line to the file
MCP_LEDGER names (`tool pid key detail`, the key being the `runwright/idempotency_key` the
call's `_meta` carried, or "-"), flushed at once, so a test sees every call the server
made, even one whose caller was killed. `cancel_order` blocks on its first execution when
MCP_HOLD_FIRST names a file to create (the test kills the worker in there).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations

KEY = "runwright/idempotency_key"
server = MCPServer("inventory", log_level="ERROR")


def note(tool: str, ctx: Context, detail: Any = "-") -> None:
    meta = ctx.request_context.meta or {}
    key = meta.get(KEY, "-") if isinstance(meta, dict) else getattr(meta, KEY, "-")
    path = os.environ.get("MCP_LEDGER")
    if path:
        with open(path, "a") as out:
            out.write(f"{tool} {os.getpid()} {key} {detail}\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(sku: str, ctx: Context) -> str:
    """Look up a product's stock by its SKU."""
    note("lookup", ctx, sku)
    return f"{sku}: 7 in stock"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))
def reserve(sku: str, quantity: int, ctx: Context) -> dict[str, Any]:
    """Reserve units of a product (the same key reserves once)."""
    note("reserve", ctx, f"{sku}x{quantity}")
    return {"sku": sku, "reserved": quantity}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
async def cancel_order(order: str, ctx: Context) -> str:
    """Cancel an order: must never happen twice."""
    note("cancel_order", ctx, order)
    hold = os.environ.get("MCP_HOLD_FIRST")
    if hold:
        try:
            os.close(os.open(hold, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                await asyncio.sleep(0.01)
    return f"cancelled {order}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def broken(reason: str, ctx: Context) -> str:
    """Always fails, saying why."""
    note("broken", ctx, reason)
    raise ToolError(f"the warehouse is closed: {reason}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def audit(period: str, ctx: Context) -> str:
    """Audit a period; refuses with a protocol error (JSON-RPC), not an error result."""
    note("audit", ctx, period)
    raise MCPError(code=INVALID_PARAMS, message=f"no audit for {period}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def server_pid(ctx: Context) -> int:
    """The server's process id."""
    note("server_pid", ctx)
    return os.getpid()


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
