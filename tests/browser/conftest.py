"""One `runwright serve` per backend for the whole browser module, not one per test: a
server's start is most of a short test. Tests share its store, so each acts as tenants
of its own (a token per tenant below) and names its keys, threads and queues apart."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator

import httpx
import pytest

import runwright as rw

from ..api.test_api import OPERATOR_TOKEN
from ..conftest import (
    BACKENDS,
    PG_BASE,
    PG_PROCESSES,
    REDIS_BASE,
    _drop_schema,
    drop_redis_namespace,
    pg_share,
)
from ..pg_budget import Budget
from ..ports import free_port
from ..process import apps
from ..process.harness import APP_SPEC, ROOT, client

# Every tenant a test signs in as: "<name>-token" is <name>'s token.
TENANTS = ["alice", "bob", "overview", "runs-a", "runs-b", "run", "pause", "threads-a", "threads-b",
           "schedules", "dead-a", "dead-b", "question", "workers", "nav", "gone", "attempts",
           "agent", "timeline", "empty", "search", "phone", "signals", "fork", "bulk-a", "bulk-b",
           "bulk-c", "bulk-d", "limits"]
SERVER_START_S = 120.0  # generous: a loaded machine starts Python slowly


def token(tenant: str) -> str:
    return f"{tenant}-token"


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ledger")


@pytest.fixture(scope="module")
def store_url(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One fresh store of `backend` for the module (dropped afterwards)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store') / 'runwright.db'}"
        return
    name = f"rw_test_{uuid.uuid4().hex[:12]}"
    if backend == "redis":
        yield f"{REDIS_BASE}?namespace={name}"
        asyncio.run(drop_redis_namespace(REDIS_BASE, name))
        return
    yield f"{PG_BASE}?schema={name}"
    asyncio.run(_drop_schema(name))


@pytest.fixture(scope="module")
def pg_module_share(backend: str, pg_budget: Budget, request: pytest.FixtureRequest) -> Iterator[None]:
    """The module's share of the PostgreSQL connection budget (tests/pg_budget.py), held as
    long as its server: the server's sessions and each test's client App and in-process
    worker (the tests themselves take none: pg_connections(0) in test_dashboard.py)."""
    with pg_share(pg_budget, PG_PROCESSES if backend == "postgres" else 0, f"{request.node.nodeid} server"):
        yield


@pytest.fixture(scope="module")
def server(pg_module_share: None, store_url: str, ledger: Path) -> Iterator[str]:
    """A `runwright serve` on the module's store, with auth on; its URL."""
    asyncio.run(_migrate(store_url))  # the schema exists before the server starts
    port = free_port()
    env = {**os.environ, "RUNWRIGHT_TOKENS": ",".join(f"{token(t)}={t}" for t in TENANTS),
           "RUNWRIGHT_OPERATOR_TOKENS": OPERATOR_TOKEN, apps.LEDGER_ENV: str(ledger)}
    log = open(ledger / f"server-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "runwright", "serve", APP_SPEC, "--port", str(port),
                             "--url", store_url], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, proc)
        yield base
    finally:
        proc.kill()
        proc.wait()
        log.close()


async def _migrate(store_url: str) -> None:
    async with client(store_url):
        pass


def _wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited while starting (see its log)"
        try:
            if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the server at {base} did not answer /healthz in {SERVER_START_S:.0f} s")


@pytest.fixture
async def worker_app(store_url: str, ledger: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[rw.App]:
    monkeypatch.setenv(apps.LEDGER_ENV, str(ledger))
    async with client(store_url) as app:
        yield app
