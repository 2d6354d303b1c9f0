"""One store fixture over every backend: each scenario runs on each.

A backend that cannot be reached fails the test; it is never skipped, so a green run
means every backend was exercised.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator

import asyncpg
import pytest
import redis.asyncio

from runwright.store import Store, store_from_url

from .pg_budget import DEFAULT_BUDGET, Budget, BudgetExhausted

PG_BASE = os.environ.get("RUNWRIGHT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
# The shared Redis of the machine: every test uses a namespace of its own and deletes it.
REDIS_BASE = os.environ.get("RUNWRIGHT_TEST_REDIS", "redis://127.0.0.1:6379/0")
BACKENDS = ["sqlite", "postgres", "redis"]
# The most PostgreSQL connections the whole run may hold at once (tests/pg_budget.py).
PG_BUDGET = int(os.environ.get("RUNWRIGHT_TEST_PG_BUDGET", DEFAULT_BUDGET))
# A PostgreSQL test's share of it when it names none (the pg_connections marker): the most
# one was measured to hold at once, with room. A test in one process holds its App's pool,
# its in-process workers' and the fixtures' sessions; one that starts worker processes (or a
# server) holds a pool in each of them too.
PG_IN_PROCESS = 14
PG_PROCESSES = 24


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("RUNWRIGHT_LOG_LEVEL", "WARNING")
    config.addinivalue_line("markers", "fast: the fast tier, ./scripts/test --fast (given at collection)")
    config.addinivalue_line(
        "markers", "alone: in a parallel run, runs with no other test beside it (timing under faults that "
        "a machine loaded by other tests upsets)")
    config.addinivalue_line(
        "markers", "pg_connections(n): the most PostgreSQL connections the test holds at once: its "
        "share of the suite's budget (tests/pg_budget.py); 0 when a wider fixture holds its share")


FAST_TIER = ("tests/unit/", "tests/conformance/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier (`./scripts/test --fast`, `-m fast`): the unit tests, and the store
    conformance scenarios on SQLite (the same scenarios run on every backend in the whole suite)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec is not None else None
        if item.nodeid.startswith(FAST_TIER) and backend in (None, "sqlite"):
            item.add_marker(pytest.mark.fast)


def pg_connections(item: pytest.Item) -> int:
    """The test's share of the PostgreSQL connection budget (0: it uses no PostgreSQL)."""
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    marker = item.get_closest_marker("pg_connections")
    if marker is not None:  # of a test on every backend: its PostgreSQL case's share
        return int(marker.args[0]) if backend in (None, "postgres") else 0
    if backend != "postgres":
        return 0
    starts_processes = item.get_closest_marker("process") is not None or any(
        f"tests/{kind}/" in item.nodeid for kind in ("process", "fleet", "api", "browser"))
    return PG_PROCESSES if starts_processes else PG_IN_PROCESS


@pytest.fixture(scope="session")
def pg_budget(tmp_path_factory: pytest.TempPathFactory) -> Budget:
    """The run's budget: one counter for every xdist worker of the run (in the folder their
    temporary folders share), or this process's alone when the run is serial."""
    base = tmp_path_factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return Budget(folder / "pg-connection-budget.json", PG_BUDGET)


@contextlib.contextmanager
def pg_share(budget: Budget, weight: int, who: str) -> Iterator[None]:
    """Hold `weight` connections of the budget (nothing for 0); fail clearly without them."""
    if weight <= 0:
        yield
        return
    try:
        ticket = budget.acquire(weight, who)
    except BudgetExhausted as exc:
        pytest.fail(f"no PostgreSQL connections for this test: {exc}", pytrace=False)
    try:
        yield
    finally:
        budget.release(ticket)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A test that failed because the server had no connection left says so, apart from
    its traceback: that is the server's limit, reached (by this run or other work on the
    shared server), not the test's finding."""
    report: pytest.TestReport = yield
    if report.failed and "too many clients already" in report.longreprtext:
        report.sections.append(("PostgreSQL connections", (
            f"The PostgreSQL server refused a connection: its max_connections were all in use. This "
            f"run holds at most {PG_BUDGET} (RUNWRIGHT_TEST_PG_BUDGET; this test's share: "
            f"{pg_connections(item)}); other work on the server holds the rest.")))
    return report


@pytest.fixture(scope="session")
def machine_lock(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The file whose lock an `alone` test holds alone and every other test shares, in a
    parallel run (None in a serial one: every test is alone there)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent / "machine"


@pytest.fixture(autouse=True)
def _machine_share(request: pytest.FixtureRequest, machine_lock: Path | None) -> Iterator[None]:
    """An `alone` test runs with no other test of the run beside it; any other test shares
    the machine. A gate taken first keeps the turns in order: once an `alone` test waits,
    no test begins until it has run."""
    if machine_lock is None:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    with open(f"{machine_lock}.gate", "a") as gate, open(machine_lock, "a") as machine:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _pg_connection_share(request: pytest.FixtureRequest, _machine_share: None,
                         pg_budget: Budget) -> Iterator[None]:
    """Autouse, so set up before the test's other fixtures and torn down after them: the
    test holds its share of the budget while anything of it may hold a connection."""
    with pg_share(pg_budget, pg_connections(request.node), request.node.nodeid):
        yield


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend: str, tmp_path) -> Iterator[str]:
    """A URL to a fresh, empty store of `backend` (dropped afterwards)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'runwright.db'}"
        return
    if backend == "memory":  # named: a second store opened on the URL shares it
        yield f"memory://rw_test_{uuid.uuid4().hex[:12]}"
        return
    if backend == "redis":
        namespace = f"rw_test_{uuid.uuid4().hex[:12]}"
        yield f"{REDIS_BASE}?namespace={namespace}"
        asyncio.run(drop_redis_namespace(REDIS_BASE, namespace))
        return
    schema = f"rw_test_{uuid.uuid4().hex[:12]}"
    yield f"{PG_BASE}?schema={schema}"
    asyncio.run(_drop_schema(schema))


async def drop_redis_namespace(base: str, namespace: str) -> None:
    """Delete every key of one namespace (never the whole database: it is shared)."""
    client = redis.asyncio.Redis.from_url(base)
    try:
        batch = []
        async for key in client.scan_iter(match=f"rw:{{{namespace}}}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                await client.unlink(*batch)
                batch = []
        if batch:
            await client.unlink(*batch)
    finally:
        await client.aclose()


async def _drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open, migrated store of each backend."""
    store = store_from_url(store_url)
    try:
        await store.open()
    except Exception as exc:  # a backend that is down fails, never skips
        pytest.fail(f"backend {store_url} unreachable: {exc}")
    await store.migrate()
    yield store
    await store.close()
