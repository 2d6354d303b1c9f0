"""The app that MCP worker subprocesses load as `tests.process.mcp_apps:app`: one agent,
`clerk`, whose tools are those of the test's MCP server (tests/integrations/mcp_servers.py)
over streamable HTTP at MCP_URL; its model is the scripted server at OPENAI_BASE_URL."""

from __future__ import annotations

import os

import runwright as rw
from runwright.integrations.mcp import MCPServer

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()
inventory = MCPServer.http(os.environ.get("MCP_URL", "http://127.0.0.1:9/mcp"), name="inventory")
# retries=0: a failed attempt ends the run, so a test sees it instead of a silent retry.
app.agent("clerk", model="openai:gpt-4o-mini", tools=[inventory], retries=0)
