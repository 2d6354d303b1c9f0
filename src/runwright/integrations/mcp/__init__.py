"""MCP both ways (`pip install 'runwright[mcp]'`):

- `MCPServer`: an MCP server's tools in runwright's own agents, each call a journaled step
  (`_tools.py`): `app.agent(..., tools=[MCPServer.stdio("python", "-m", "srv")])`;
- `create_mcp_server`: an app's runs as MCP tools, what `runwright mcp APP` serves
  (`_server.py`; loaded at first use: it needs the HTTP API's models, which a worker does not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._tools import IDEMPOTENCY_META_KEY, MCPServer

if TYPE_CHECKING:
    from ._server import create_mcp_server

__all__ = ["IDEMPOTENCY_META_KEY", "MCPServer", "create_mcp_server"]


def __getattr__(name: str) -> Any:
    if name == "create_mcp_server":
        from ._server import create_mcp_server

        return create_mcp_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
