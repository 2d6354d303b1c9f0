"""An agent whose tools are an MCP server's (examples/inventory_server.py, over stdio):

    runwright worker examples.mcp_agent:app          # from the project's root
    runwright submit examples.mcp_agent:app stock --args '{"input": "Is A1 in stock? Reserve 2."}' --wait

Its model is `openai:gpt-4o-mini` (OPENAI_BASE_URL / OPENAI_API_KEY: any OpenAI-compatible
endpoint; tests/integrations/test_mcp_example.py runs it against a scripted one)."""

import sys

import runwright as rw
from runwright.integrations.mcp import MCPServer

app = rw.App()
inventory = MCPServer.stdio(sys.executable, "-m", "examples.inventory_server", name="inventory")
stock = app.agent("stock", model="openai:gpt-4o-mini", tools=[inventory],
                  instructions="Answer stock questions; reserve when asked.")
