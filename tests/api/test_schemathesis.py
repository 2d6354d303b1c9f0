"""schemathesis fuzzes every operation of /openapi.json against the real server: no 5xx,
and no response that breaks the published schema."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from .test_api import server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process
ST = Path(sys.executable).with_name("st")


async def test_the_openapi_contract_holds_under_fuzzing(server: str, worker_app) -> None:  # noqa: F811
    proc = await asyncio.create_subprocess_exec(
        str(ST), "run", f"{server}/openapi.json", "-H", "Authorization: Bearer alice-token",
        "-c", "not_a_server_error,response_schema_conformance", "-n", "20", "--request-timeout", "10",
        # The SSE stream of a run that no worker executes never ends: it is tested on its own.
        "--exclude-path-regex", "stream", "--phases", "examples,fuzzing", "--seed", "42",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output = (await asyncio.wait_for(proc.communicate(), 300))[0].decode()
    assert proc.returncode == 0, output[-3000:]
    assert "passed" in output and " failed" not in output.split("SUMMARY")[-1]
