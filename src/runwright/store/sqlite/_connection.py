"""The SQLite store's connections: each used from one dedicated thread of its own, so that
a `BEGIN IMMEDIATE` ... `COMMIT` run whole on it never interleaves with another coroutine's
statements, and the event loop never blocks while SQLite waits for another process's write
lock."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

from ...errors import StoreError
from .._moved import refusal_in
from ..sql._dialect import SQLITE, Dialect

__all__ = ["BLINK_CODES", "Connection", "StoreThread", "is_blink"]

T = TypeVar("T")


# The primary result codes of the errors that pass: another process holds the lock (BUSY,
# LOCKED, PROTOCOL), the disk or the file system failed or filled up (IOERR, FULL, CANTOPEN).
# These are the store's blinks, retried with backoff; any other OperationalError is raised
# as it is, at once.
BLINK_CODES = frozenset({5, 6, 10, 13, 14, 15})  # BUSY LOCKED IOERR FULL CANTOPEN PROTOCOL


def is_blink(exc: sqlite3.OperationalError) -> bool:
    """Whether the error may pass by itself (a lock, the disk), not a bug in a statement."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # raised by the sqlite3 module itself, not by SQLite: not a blink
        return False
    return code & 0xFF in BLINK_CODES  # extended codes carry the primary in the low byte


class StoreThread:
    """One SQLite connection and the one thread that uses it. Each opening makes a thread
    of its own, so a store closed and opened again works (a shut-down executor takes no work)."""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name
        self.executor: ThreadPoolExecutor | None = None
        self.conn: sqlite3.Connection | None = None

    async def start(self, connect: Callable[[], sqlite3.Connection]) -> None:
        if self.executor is None:
            self.executor = ThreadPoolExecutor(1, thread_name_prefix=self.name)
        if self.conn is None:
            self.conn = await asyncio.get_running_loop().run_in_executor(self.executor, connect)

    async def stop(self) -> None:
        try:
            if self.conn is not None:
                await self.call(lambda conn: conn.close())
        finally:
            self.conn = None
            if self.executor is not None:
                self.executor.shutdown(wait=False)
                self.executor = None

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn, executor = self.conn, self.executor
        if conn is None or executor is None:
            raise StoreError(f"sqlite {self.path}: the store is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, fn, conn)
        except sqlite3.OperationalError as exc:
            if not is_blink(exc):
                raise  # a bug (no such column, a syntax error): retrying cannot help
            raise StoreError(f"sqlite {self.path}: {exc}") from exc
        except sqlite3.IntegrityError as exc:
            # A write to a store `runwright move` sealed: its triggers raise the line.
            moved = refusal_in(str(exc))
            if moved is None:
                raise
            raise moved from exc

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` inside BEGIN IMMEDIATE: the write lock is taken up front, so two
        processes never both read and then both write (no upgrade deadlock)."""

        def transaction(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return out

        return await self.call(transaction)


class Connection:
    """`SqlConnection` over one of the store's threads."""

    dialect: Dialect = SQLITE

    def __init__(self, thread: StoreThread) -> None:
        self._thread = thread

    def _prepare(self, sql: str) -> str:
        """A statement as SQLite takes it: the shared dialect's."""
        return SQLITE.prepare(sql)

    def _run(self, sql: str, args: Sequence[Any]) -> Callable[[sqlite3.Connection], sqlite3.Cursor]:
        prepared = self._prepare(sql)
        return lambda conn: conn.execute(prepared, tuple(args))

    async def fetch(self, sql: str, *args: Any) -> list[Sequence[Any]]:
        run = self._run(sql, args)
        return await self.call(lambda conn: run(conn).fetchall())

    async def fetchrow(self, sql: str, *args: Any) -> Sequence[Any] | None:
        run = self._run(sql, args)
        return await self.call(lambda conn: run(conn).fetchone())

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> int:
        run = self._run(sql, args)
        return await self.call(lambda conn: run(conn).rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        prepared = self._prepare(sql)
        await self.call(lambda conn: conn.executemany(prepared, [tuple(r) for r in rows]))

    async def notify(self, topic: str, run_ids: Sequence[int] = ()) -> None:
        """Other processes see the commit through their data-version poll."""

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a function of the raw connection (the hot path's, inside this transaction)."""
        return await self._thread.call(fn)
