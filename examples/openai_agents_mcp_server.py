"""The order desk's MCP server for examples/openai_agents_triage.py: one read-only tool,
over stdio (the `mcp` SDK's MCPServer, formerly FastMCP). The triage agent starts it.

    python examples/openai_agents_mcp_server.py     # speaks MCP on stdin/stdout
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("order-desk")
ORDERS = {42: "lost in transit, $30", 7: "delivered, $12"}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))  # so: idempotent, safe to repeat
def order_status(order_id: int) -> str:
    """Where an order is, and what it cost."""
    return ORDERS.get(order_id, "unknown order")


if __name__ == "__main__":
    server.run("stdio")
