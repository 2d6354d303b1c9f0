"""The PostgreSQL store keeps one session of its pool out of it between uses (store/postgres/
_kept.py): a borrower that finds it free skips the pool's work. These pin what that must never
cost: two borrowers at once never share a session, and a session left in doubt (a borrower
cancelled mid-statement, a session the server cut, a transaction left open) is never lent
again; the next borrower gets a working one. A cut the borrower did not see (the session
idle, or its statements done) costs no one an error, as with the pool alone."""

from __future__ import annotations

import asyncio
import uuid
from typing import AsyncIterator

import asyncpg
import pytest

from runwright.errors import StoreUnreachable
from runwright.store.postgres._store import PostgresStore

from ..conftest import PG_BASE


@pytest.fixture
async def store() -> AsyncIterator[PostgresStore]:
    schema = f"rw_test_{uuid.uuid4().hex[:12]}"
    made = PostgresStore(PG_BASE, PG_BASE, schema)
    await made.open()
    try:
        yield made
    finally:
        await made.close()
        admin = await asyncpg.connect(PG_BASE)
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


async def _pid(store: PostgresStore) -> int:
    async with store._conn() as conn:  # noqa: SLF001
        return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def test_one_after_another_borrowers_share_the_kept_session(store: PostgresStore) -> None:
    pids = {await _pid(store) for _ in range(5)}
    assert len(pids) == 1


async def test_borrowers_at_once_never_share_a_session(store: PostgresStore) -> None:
    inside = asyncio.Event()
    release = asyncio.Event()
    pids: list[int] = []

    async def borrow() -> None:
        async with store._conn() as conn:  # noqa: SLF001
            pids.append(int(await conn.fetchval("SELECT pg_backend_pid()")))
            if len(pids) == 3:
                inside.set()
            await release.wait()

    tasks = [asyncio.create_task(borrow()) for _ in range(3)]
    await asyncio.wait_for(inside.wait(), 30)
    release.set()
    await asyncio.gather(*tasks)
    assert len(set(pids)) == 3


async def test_a_borrower_cancelled_mid_statement_leaves_a_working_session(store: PostgresStore) -> None:
    await _pid(store)  # the kept session exists before the borrower that is cancelled
    started = asyncio.Event()

    async def sleeper() -> None:
        async with store._conn() as conn:  # noqa: SLF001
            started.set()
            await conn.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(sleeper())
    await started.wait()
    await asyncio.sleep(0.2)  # the statement is on the server
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The cancelled session went back to the pool; whichever comes next answers at once.
    assert await asyncio.wait_for(_pid(store), 10) > 0
    for _ in range(3):
        async with store._conn() as conn:  # noqa: SLF001
            assert await conn.fetchval("SELECT 41 + 1") == 42


async def _cut(pid: int) -> None:
    admin = await asyncpg.connect(PG_BASE)
    try:
        # With a timeout it returns once the session has ended on the server.
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
    finally:
        await admin.close()


async def _seen_ended(conn: asyncpg.Connection) -> None:
    """Until this process has seen the session end: asyncpg then closes it, and the pool
    takes it back from a loan, after which every call on the proxy is refused."""
    async with asyncio.timeout(30):
        while True:
            try:
                if conn.is_closed():
                    return
            except asyncpg.InterfaceError:  # "released back to the pool"
                return
            await asyncio.sleep(0.01)


async def test_a_kept_session_the_server_cut_while_idle_costs_the_next_borrower_nothing(
        store: PostgresStore) -> None:
    # A blip (pg_terminate_backend, a restart) mostly finds the kept session idle between
    # loans. The pool takes it back as it sees it end; the next borrower must get a fresh
    # session, as from the pool's own acquire, not the refused proxy (a worker of
    # `runwright verify` exited on that StoreUnreachable).
    async with store._conn() as conn:  # noqa: SLF001
        kept, held = int(await conn.fetchval("SELECT pg_backend_pid()")), conn
    await _cut(kept)
    await _seen_ended(held)
    fresh = await _pid(store)
    assert fresh != kept
    assert await _pid(store) == fresh  # and the fresh one is kept in turn


async def test_a_session_cut_after_its_borrowers_last_statement_is_let_go_quietly(
        store: PostgresStore) -> None:
    async with store._conn() as conn:  # noqa: SLF001
        kept = int(await conn.fetchval("SELECT pg_backend_pid()"))
        await _cut(kept)
        await _seen_ended(conn)
    # The borrower's work was done: leaving raised nothing, and the session is not lent again.
    assert await _pid(store) != kept


async def test_a_session_cut_mid_statement_is_unreachable_and_not_lent_again(store: PostgresStore) -> None:
    kept = await _pid(store)
    started = asyncio.Event()

    async def sleeper() -> None:
        async with store._conn() as conn:  # noqa: SLF001
            started.set()
            await conn.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(sleeper())
    await started.wait()
    await _cut(kept)
    with pytest.raises(StoreUnreachable):
        await asyncio.wait_for(task, 30)
    fresh = await _pid(store)
    assert fresh != kept
    assert await _pid(store) == fresh


async def test_a_transaction_left_open_is_not_lent_again(store: PostgresStore) -> None:
    kept = await _pid(store)
    async with store._conn() as conn:  # noqa: SLF001
        await conn.execute("BEGIN")
    async with store._conn() as conn:  # noqa: SLF001
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
                                   " AND state LIKE 'idle in transaction%'", kept) == 0


async def test_a_refused_statement_keeps_the_session(store: PostgresStore) -> None:
    kept = await _pid(store)
    with pytest.raises(asyncpg.UndefinedTableError):
        async with store._conn() as conn:  # noqa: SLF001
            await conn.fetchval("SELECT 1 FROM no_such_table")
    assert await _pid(store) == kept


async def test_close_waits_for_a_borrower_and_ends_every_session(store: PostgresStore) -> None:
    inside = asyncio.Event()

    async def borrow() -> int:
        async with store._conn() as conn:  # noqa: SLF001
            inside.set()
            await asyncio.sleep(0.2)
            return int(await conn.fetchval("SELECT pg_backend_pid()"))

    task = asyncio.create_task(borrow())
    await inside.wait()
    await asyncio.wait_for(store.close(), 30)
    pid = await task
    admin = await asyncpg.connect(PG_BASE)
    try:
        for _ in range(200):  # a backend leaves pg_stat_activity a moment after its client
            if not await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"session {pid} outlived the store's close")
    finally:
        await admin.close()
