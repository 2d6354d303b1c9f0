"""The request body limit holds for a chunked body too, which declares no Content-Length:
a real `runwright serve` process, a real chunked upload of 64 MiB."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest

from runwright.server._factory import MAX_BODY_BYTES

from ..ports import free_port
from ..process import apps
from ..process.harness import APP_SPEC, ROOT, client, wait_until
from .test_api import _healthy

pytestmark = pytest.mark.process
UPLOAD_BYTES = 64 << 20
CHUNK = b"x" * (64 << 10)


def peak_memory_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM): what it ever held at once."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


@pytest.mark.parametrize("backend", ["sqlite"])  # the limit is the server's, the same on every store
async def test_a_chunked_body_over_the_limit_is_refused_without_being_kept(store_url: str,
                                                                          tmp_path: Path) -> None:
    async with client(store_url):  # the schema exists before the server starts
        pass
    port = free_port()
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "runwright", "serve", APP_SPEC, "--port", str(port), "--url", store_url],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "RUNWRIGHT_TOKENS": "t=alice", apps.LEDGER_ENV: str(tmp_path)})
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_until(lambda: _healthy(base), "the server answers /healthz")
        before = peak_memory_bytes(server.pid)
        sent = 0

        async def upload() -> AsyncIterator[bytes]:
            nonlocal sent
            yield b'{"task": "record", "args": {"n": 1, "pad": "'
            while sent < UPLOAD_BYTES:
                sent += len(CHUNK)
                yield CHUNK
            yield b'"}}'

        async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer t"},
                                     timeout=120) as http:
            answer = await http.post("/runs", content=upload(),
                                     headers={"Content-Type": "application/json"})
            assert "content-length" not in answer.request.headers  # chunked, as promised
            assert answer.status_code == 413, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert f"limited to {MAX_BODY_BYTES} bytes" in answer.json()["detail"]
            assert (await http.get("/runs")).json()["items"] == []  # the connection is fine
        grown = peak_memory_bytes(server.pid) - before
        assert grown < UPLOAD_BYTES // 4, f"the server held {grown >> 20} MiB of a refused body"
    finally:
        server.kill()
        server.wait()
