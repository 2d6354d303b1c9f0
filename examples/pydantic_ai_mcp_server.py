"""A tiny MCP server (stdio) for examples/pydantic_ai_support.py: an order lookup that
only reads (annotated read-only: runwright calls it idempotently, with a stable key in the
call's `_meta`), and a note that writes (no hints: at most once).

    python examples/pydantic_ai_mcp_server.py               # speaks MCP on stdin/stdout
    python examples/pydantic_ai_mcp_server.py --http 8765   # streamable HTTP at :8765/mcp
"""

from __future__ import annotations

import json
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("orders")
ORDERS = {"42": {"status": "lost in transit", "amount_usd": 30}}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup_order(order_id: str, ctx: Context) -> str:
    """Look up an order by its number."""
    meta = ctx.request_context.meta or {}
    key = meta.get("idempotency_key") if isinstance(meta, dict) else getattr(meta, "idempotency_key", None)
    return json.dumps({**ORDERS.get(order_id, {"status": "unknown order"}), "key": key})


@server.tool()
def add_note(order_id: str, text: str) -> str:
    """Add a note to an order."""
    return f"noted on {order_id}: {text}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
