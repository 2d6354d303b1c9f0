"""Starting the test MCP server (mcp_servers.py) and reading its ledger, for the tests
in-process and the process tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_MODULE = "tests.integrations.mcp_servers"


def executed(ledger: Path, tool: str | None = None) -> list[list[str]]:
    """The server's ledger lines [tool, pid, key, detail], of `tool` or all."""
    if not ledger.exists():
        return []
    lines = [line.split(" ", 3) for line in ledger.read_text().splitlines()]
    return [line for line in lines if tool is None or line[0] == tool]


def start_http_server(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`python -m tests.integrations.mcp_servers http PORT`, once it accepts connections."""
    process = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, "http", str(port)], cwd=ROOT,
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "the MCP HTTP server exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("the MCP HTTP server did not start listening")
