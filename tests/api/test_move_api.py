"""A server on a store `runwright move` sealed answers every write with a 503 problem that
says where the deployment is moving and a Retry-After; reads go on; once the move is
abandoned, writes are taken again. The seal is the move's own (runwright.move._ends), on
a `runwright serve` process that was running before it."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

import runwright as rw
from runwright.move._ends import open_end
from runwright.store._moved import mark_holder, refusal_text

from ..process.harness import ROOT
from .test_api import as_, server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.process, pytest.mark.parametrize("backend", ["sqlite", "postgres"])]
TARGET = "postgresql://rw@db.example:5432/prod?schema=runwright"


async def test_a_sealed_store_answers_writes_with_503_and_retry_after(server: str, store_url: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        before = await http.post("/runs", json={"task": "record", "args": {"n": 1}})
        assert before.status_code == 201, before.text
        end = await open_end(store_url)
        try:
            await end.seal(mark_holder("moving", TARGET, 7), refusal_text("moving", TARGET, 7))
        finally:
            await end.close()
        refused = await http.post("/runs", json={"task": "record", "args": {"n": 2}})
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["retry-after"] == "7"
        body = refused.json()
        assert body["title"] == "Deployment moving" and f"moving to {TARGET}, retry in 7 s" in body["detail"]
        cancel = await http.post(f"/runs/{before.json()['id']}/cancel")
        assert cancel.status_code == 503 and cancel.headers["retry-after"] == "7", cancel.text
        read = await http.get(f"/runs/{before.json()['id']}")
        assert read.status_code == 200 and read.json()["state"] == "queued"  # the cancel wrote nothing

        argv = [sys.executable, "-m", "runwright", "move", "--abandon", "--url", store_url]
        abandoned = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert abandoned.returncode == 0, abandoned.stderr
        after = await http.post("/runs", json={"task": "record", "args": {"n": 3}})
        assert after.status_code == 201, after.text
        assert after.json()["id"] > before.json()["id"]
        assert isinstance(rw.DeploymentMoved("x", state="moving", target=TARGET), rw.RunwrightError)
