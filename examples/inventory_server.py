"""A small MCP server (the `mcp` SDK's MCPServer) for examples/mcp_agent.py: stock lookups
(read-only: called again safely, with a key) and reservations (idempotent: the key in the
call's `_meta` makes a repeat reserve nothing more). Run by the agent's workers over stdio:
`python -m examples.inventory_server`."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

STOCK = {"A1": 7, "B2": 0}
server = MCPServer("inventory", log_level="ERROR")
reserved: dict[str, int] = {}  # idempotency key -> quantity: a repeated call reserves nothing more


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(sku: str) -> str:
    """How many units of a product (by its SKU) are in stock."""
    return f"{sku}: {STOCK.get(sku, 0)} in stock"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
def reserve(sku: str, quantity: int, ctx: Context) -> dict[str, object]:
    """Reserve units of a product for an order."""
    key = (ctx.request_context.meta or {}).get("runwright/idempotency_key", "")
    if key not in reserved:
        reserved[key] = quantity
        STOCK[sku] = STOCK.get(sku, 0) - quantity
    return {"sku": sku, "reserved": reserved[key], "left": STOCK.get(sku, 0)}


if __name__ == "__main__":
    server.run("stdio")
