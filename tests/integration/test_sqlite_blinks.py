"""SQLite: a lock or the disk is a blink (StoreError, retried); a bug in a statement is not.

A blink is retried with backoff for up to a minute (`resilience.through_blinks`); a
statement that names no such column would fail the same way for that whole minute, so it
is raised at once, as it is. Real SQLite files and a real second connection throughout.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import AsyncIterator

import pytest

import runwright as rw
from runwright.core._resilience import through_blinks
from runwright.store import store_from_url
from runwright.store.sqlite._connection import is_blink
from runwright.store.sqlite._store import SqliteStore


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = store_from_url(f"sqlite:///{tmp_path / 'runwright.db'}")
    assert isinstance(store, SqliteStore)
    await store.open()
    await store.migrate()
    yield store
    await store.close()


async def test_a_statement_naming_no_such_column_fails_at_once(sqlite_store: SqliteStore) -> None:
    calls = []

    async def buggy() -> object:
        calls.append(1)
        async with sqlite_store._reading() as conn:
            return await conn.fetch("SELECT no_such_column FROM runs")

    with pytest.raises(sqlite3.OperationalError, match="no such column: no_such_column") as raised:
        await through_blinks(buggy)
    assert not isinstance(raised.value, rw.StoreError) and len(calls) == 1
    with pytest.raises(sqlite3.OperationalError, match="syntax error"):
        await sqlite_store._hot.call(lambda conn: conn.execute("SELEKT 1"))


async def test_a_database_locked_by_another_process_is_a_blink(sqlite_store: SqliteStore) -> None:
    holder = sqlite3.connect(sqlite_store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write lock

    def write_without_waiting(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA busy_timeout = 0")  # meet the lock now, not after 30 s
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute("PRAGMA busy_timeout = 30000")

    try:
        with pytest.raises(rw.StoreError, match="database is locked"):
            await sqlite_store._hot.call(write_without_waiting)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await sqlite_store.schema_version() == sqlite_store.schema_version_known


def test_which_sqlite_errors_are_blinks(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    cases = [("BEGIN IMMEDIATE", True), ("SELECT nope FROM t", False),
             ("SELECT * FROM no_such_table", False), ("SELEKT 1", False)]
    for sql, blink in cases:
        with pytest.raises(sqlite3.OperationalError) as raised:
            other.execute(sql)
        assert is_blink(raised.value) is blink, (sql, raised.value)
    with pytest.raises(sqlite3.OperationalError, match="unable to open") as cannot_open:
        sqlite3.connect(tmp_path / "missing" / "x.db")
    assert is_blink(cannot_open.value)
    holder.execute("ROLLBACK")
    holder.close()
    other.close()


async def test_a_shared_transaction_cancelled_while_it_begins_leaves_none_open(
        sqlite_store: SqliteStore, tmp_path: Path) -> None:
    """Cancelled while BEGIN waits for another process's write lock: once the lock is
    free, the next shared transaction begins (none was left open on the connection)."""
    other = sqlite3.connect(tmp_path / "runwright.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock: our BEGIN waits on it
        wid = 10**6
        stopping = asyncio.create_task(sqlite_store.worker_deregister(wid))
        await asyncio.sleep(0.3)  # its BEGIN IMMEDIATE is on the thread, waiting
        stopping.cancel()
        # The lock is freed while the cancelled call still waits for the rollback it queued
        # behind its BEGIN: so the BEGIN succeeds (freed only after the call, it would wait
        # out the 30 s busy timeout and fail, and the rollback would have nothing to undo).
        asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
        await asyncio.gather(stopping, return_exceptions=True)
    finally:
        other.close()
    await sqlite_store.worker_deregister(10**6)  # "cannot start a transaction within a transaction" before



async def test_a_transaction_cancelled_while_its_commit_waits_for_the_thread_leaves_none_open(
        sqlite_store: SqliteStore) -> None:
    """A caller cancelled while its COMMIT waited in the connection thread's queue had the
    COMMIT dropped (a queued call that is cancelled never runs), the transaction left open,
    and every later transaction on the connection refused ("cannot start a transaction within
    a transaction": a worker's heartbeat died of it, in a fresh-clone run). The COMMIT runs."""
    await sqlite_store._hot.call(lambda conn: conn.execute("CREATE TABLE scratch (x INTEGER)"))
    loop = asyncio.get_running_loop()
    busy, release = asyncio.Event(), threading.Event()

    def occupy(_conn: sqlite3.Connection) -> None:
        loop.call_soon_threadsafe(busy.set)
        release.wait(30)

    async def writer() -> None:
        async with sqlite_store._transaction() as conn:
            await conn.execute("INSERT INTO scratch VALUES (1)")
            # The thread is taken before the COMMIT is queued: the COMMIT waits behind it.
            occupied = asyncio.ensure_future(sqlite_store._shared.call(occupy))
            await busy.wait()
        await occupied

    task = asyncio.create_task(writer())
    await busy.wait()
    await asyncio.sleep(0.05)  # the writer has queued its COMMIT behind `occupy`
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with sqlite_store._transaction() as conn:  # begins: no transaction was left open
        assert await conn.fetchval("SELECT count(*) FROM scratch") == 1
