"""schemathesis fuzzes every operation of /openapi.json against the real server: no 5xx,
and no response that breaks the published schema."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from .test_api import OPERATOR_TOKEN, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process
ST = Path(sys.executable).with_name("st")


async def test_the_openapi_contract_holds_under_fuzzing(server: str, worker_app) -> None:  # noqa: F811
    # As a tenant over what a tenant may do, then as the operator over every operation
    # (schedules, /metrics and /fleet are the operator's: a tenant only ever gets 403).
    await _fuzz(server, "alice-token", "--exclude-path-regex", "stream|/schedules|/metrics|/fleet")
    await _fuzz(server, OPERATOR_TOKEN, "--exclude-path-regex", "stream")


async def _fuzz(base_url: str, token: str, *options: str) -> None:
    # The SSE stream of a run that no worker executes never ends: it is tested on its own.
    proc = await asyncio.create_subprocess_exec(
        str(ST), "run", f"{base_url}/openapi.json", "-H", f"Authorization: Bearer {token}",
        "-c", "not_a_server_error,response_schema_conformance", "-n", "20", "--request-timeout", "10",
        *options, "--phases", "examples,fuzzing", "--seed", "42",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output = (await asyncio.wait_for(proc.communicate(), 300))[0].decode()
    assert proc.returncode == 0, output[-3000:]
    assert "passed" in output and " failed" not in output.split("SUMMARY")[-1], output[-3000:]
