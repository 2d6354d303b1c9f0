"""A server that holds the payload keys serves each tenant its own runs plain, and the
operator (an operator token) the deployment's own runs plain; a tenant's encrypted
payloads show sealed to the operator — a placeholder naming the key id and size — unless
the server was started with --operator-decode and the request asks `decode=1`. A tenant
cannot ask; each decode is one audit line in the server's log. Over a real `runwright
serve`, on every backend."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..process import apps
from ..process.harness import client, wait_until
from .test_api import OPERATOR_TOKEN, TOKENS, as_, serving

pytestmark = pytest.mark.process
MARKER = "alice-sealed-m4rk3r"


class Keys:
    """One key under an id of this test's own (the keyring is the process's: one id, one key)."""

    def __init__(self) -> None:
        self.key_id = f"op-{uuid.uuid4().hex[:8]}"
        self.env = {"RUNWRIGHT_PAYLOAD_KEYS": f"{self.key_id}={base64.b64encode(os.urandom(32)).decode()}",
                    "RUNWRIGHT_PAYLOAD_ENCRYPT_WITH": self.key_id}


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
async def keyed_worker(store_url: str, tmp_path, monkeypatch, keys: Keys) -> AsyncIterator[rw.App]:
    """This process's App with the keys (from the environment, as a deployment's processes)."""
    monkeypatch.setenv(apps.LEDGER_ENV, str(tmp_path))
    for name, value in keys.env.items():
        monkeypatch.setenv(name, value)
    async with client(store_url) as app:
        yield app


def _server_log(tmp_path: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in tmp_path.glob("server-*.log"))


def _audit_lines(tmp_path: Path) -> list[str]:
    return [line for line in _server_log(tmp_path).splitlines() if "operator decode:" in line]


async def _tenant_runs(http: httpx.AsyncClient, worker: rw.App) -> tuple[int, int]:
    """Alice's two runs, ended: one carrying MARKER in its arguments and result, one with a
    journaled step and emitted events."""
    kept = await http.post("/runs", json={"task": "keep", "args": {"value": {"secret": MARKER}}})
    stepped = await http.post("/runs", json={"task": "emitting_steps", "args": {"steps": 1}})
    assert kept.status_code == stepped.status_code == 201, (kept.text, stepped.text)
    async with running_worker(worker):
        for made in (kept, stepped):
            await (await worker.get(made.json()["id"])).result(timeout_s=60)
    return kept.json()["id"], stepped.json()["id"]


async def _operator_reads(http: httpx.AsyncClient, kept: int, stepped: int,
                          params: dict[str, str]) -> dict[str, Any]:
    """Every read of alice's payloads the operator makes, by name: each answer's JSON."""
    got = {"run": (await http.get(f"/runs/{kept}", params=params)).json(),
           "list": (await http.get("/runs", params={**params, "tenant": "alice"})).json(),
           "steps": (await http.get(f"/runs/{stepped}/steps", params=params)).json(),
           "events": (await http.get(f"/runs/{stepped}/events", params=params)).json(),
           "state": (await http.get(f"/runs/{stepped}/state", params=params)).json()}
    async with http.stream("GET", f"/runs/{stepped}/events/stream", params=params) as stream:
        got["stream"] = [json.loads(line[6:]) async for line in stream.aiter_lines()
                         if line.startswith("data: ")]
    return got


async def test_the_operator_reads_a_tenants_payloads_sealed_unless_it_decodes(
        store_url: str, tmp_path, keyed_worker: rw.App, keys: Keys) -> None:
    async with serving(store_url, tmp_path, TOKENS, env=keys.env, args=("--operator-decode",)) as base, \
            httpx.AsyncClient(base_url=base, headers=as_("alice-token"), timeout=60) as alice, \
            httpx.AsyncClient(base_url=base, headers=as_(OPERATOR_TOKEN), timeout=60) as operator:
        kept, stepped = await _tenant_runs(alice, keyed_worker)
        raw = await keyed_worker.store.run_get(kept)
        assert raw is not None and MARKER not in raw.args and keys.key_id in raw.args  # sealed as stored

        # Alice's own reads: plain, as ever (the API is transparent to the tenant).
        mine = (await alice.get(f"/runs/{kept}")).json()
        assert mine["args"] == {"value": {"secret": MARKER}} and mine["result"] == {"secret": MARKER}
        assert (await alice.get(f"/runs/{stepped}/steps")).json()[0]["result"] == 0
        # ... and she cannot ask for the operator's decode.
        refused = await alice.get(f"/runs/{kept}", params={"decode": "1"})
        assert refused.status_code == 403 and "operator" in refused.json()["detail"], refused.text

        # What the dashboard reads to show its decode switch: the operator's, not hers.
        assert (await operator.get("/session")).json()["operator_decode"] is True
        assert (await alice.get("/session")).json()["operator_decode"] is False
        # The operator, not asking: every payload of hers a placeholder naming the key.
        sealed = await _operator_reads(operator, kept, stepped, {})
        assert MARKER not in json.dumps(sealed) and '"phase"' not in json.dumps(sealed)
        placeholder = sealed["run"]["args"]["~sealed"]
        assert placeholder["key"] == keys.key_id and placeholder["bytes"] > len(MARKER)
        assert sealed["run"]["result"]["~sealed"]["key"] == keys.key_id
        assert sealed["list"]["items"][-1]["args"]["~sealed"]["key"] == keys.key_id
        assert sealed["steps"][0]["result"]["~sealed"]["key"] == keys.key_id
        progress = [e for e in sealed["events"]["items"] if e["kind"] == "progress"]
        assert progress and all(e["data"]["~sealed"]["key"] == keys.key_id for e in progress)
        assert [e for e in sealed["stream"] if e["kind"] == "progress"] == progress
        assert sealed["events"]["items"][0]["data"]["task"] == "emitting_steps"  # runwright's own: plain
        assert _audit_lines(tmp_path) == []  # nothing decoded, nothing logged

        # The operator asking, on a server that allows it: plain, and one audit line per read.
        plain = await _operator_reads(operator, kept, stepped, {"decode": "1"})
        assert plain["run"]["args"] == {"value": {"secret": MARKER}}
        assert plain["run"]["result"] == {"secret": MARKER}
        assert plain["steps"][0]["result"] == 0
        assert "~sealed" not in json.dumps(plain)
        assert [e["data"]["phase"] for e in plain["stream"] if e["kind"] == "progress"] == ["before", "after"]
        await wait_until(lambda: _logged(tmp_path, 6), "six audit lines")
        lines = _audit_lines(tmp_path)
        assert all("operator token " in line and "(tenant alice)" in line for line in lines), lines
        assert OPERATOR_TOKEN not in _server_log(tmp_path)  # its fingerprint, never the token
        assert sum(f"run {kept} " in line and f"GET /runs/{kept} " in line.replace(")", " ")
                   for line in lines) == 1, lines

        # The deployment's own run (no tenant's): the operator reads it plain without asking.
        own = await operator.post("/runs", json={"task": "keep", "args": {"value": MARKER}, "delay_s": 3600})
        assert own.status_code == 201 and own.json()["args"] == {"value": MARKER}
        assert (await operator.get(f"/runs/{own.json()['id']}")).json()["args"] == {"value": MARKER}
        assert len(_audit_lines(tmp_path)) == 6


async def _logged(tmp_path: Path, count: int) -> bool:
    return len(_audit_lines(tmp_path)) >= count


async def test_decode_is_refused_on_a_server_without_the_switch(
        store_url: str, tmp_path, keyed_worker: rw.App, keys: Keys) -> None:
    async with serving(store_url, tmp_path, TOKENS, env=keys.env) as base, \
            httpx.AsyncClient(base_url=base, headers=as_(OPERATOR_TOKEN), timeout=60) as operator:
        made = await operator.post("/runs", json={"task": "keep", "args": {"value": 1}, "delay_s": 3600})
        run_id = made.json()["id"]
        off = await operator.get(f"/runs/{run_id}", params={"decode": "1"})
        assert off.status_code == 403 and "--operator-decode" in off.json()["detail"], off.text
        assert off.headers["content-type"] == "application/problem+json"
        bad = await operator.get(f"/runs/{run_id}", params={"decode": "maybe"})
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "query.decode", bad.text
        assert (await operator.get(f"/runs/{run_id}", params={"decode": "0"})).status_code == 200
