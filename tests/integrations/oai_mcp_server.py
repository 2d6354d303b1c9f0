"""A real MCP server over stdio (the `mcp` SDK's MCPServer, formerly FastMCP) for the OpenAI
Agents SDK adapter's tests: one read-only tool and one that claims nothing (so destructive,
by MCP's defaults). Each call appends `tool key` to the file RUNWRIGHT_MCP_LEDGER names,
the key being the idempotency key the request's `_meta` carried ("-" when none)."""

from __future__ import annotations

import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("orders")


def note(tool: str, ctx: Context) -> None:
    meta = ctx.request_context.meta
    key = (meta.get("idempotency_key") if isinstance(meta, dict)
           else getattr(meta, "idempotency_key", None)) if meta is not None else None
    with open(os.environ["RUNWRIGHT_MCP_LEDGER"], "a") as out:
        out.write(f"{tool} {key or '-'}\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def order_status(order_id: int, ctx: Context) -> str:
    """Where an order is."""
    note("order_status", ctx)
    return f"order {order_id} shipped"


@server.tool()
def cancel_order(order_id: int, ctx: Context) -> str:
    """Cancel an order."""
    note("cancel_order", ctx)
    return f"order {order_id} cancelled"


if __name__ == "__main__":
    server.run("stdio")
