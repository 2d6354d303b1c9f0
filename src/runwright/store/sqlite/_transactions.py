"""Transactions the application writes in, on SQLite: a transactional step's (its writes
and its journal entry commit together), and the caller's own, where a transactional
submission, signal or publish is written (kept only if the caller's transaction commits).

A transaction holds the database's one write lock from BEGIN IMMEDIATE to its end, so
no takeover, claim or finish of another process interleaves with it: the fence read at
the end is the fence at commit. They run on a connection and a thread kept for them, never
the store's (which begins and commits its own transactions: a second BEGIN on it would
fail), one at a time in a process (as SQLite lets only one writer in at a time anyway; a
connection opened for each cost 0.6-0.9 ms). Keep them short: every other writer waits.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence, TypeVar

from ...errors import InvalidInput, LeaseLost
from ...runs import Run
from .._flow_rules import refuse_flow_in
from .._hub import events_topic
from .._params import RunInsertParams, StepRecordParams, StepTransaction
from . import _hot_path as hot_path
from ._base import SqliteBase
from ._connection import Connection, StoreThread

__all__ = ["CallerConnection", "SqliteTransaction", "SqliteTransactions"]

_PLACEHOLDER = re.compile(r"\$(\d+)")
T = TypeVar("T")


class SqliteTransaction(Connection):
    """The application's handle on an open SQLite transaction: asyncpg's four calls with its
    `$1` placeholders (so a step's SQL reads the same on both backends), as the store's own
    connections make them, but for the statement: the application's, with only its
    placeholders rewritten, none of the shared dialect's words. `execute` answers the rows
    changed; `call(fn)` runs `fn(sqlite3.Connection)` in the transaction, for anything else."""

    def _prepare(self, sql: str) -> str:
        return _PLACEHOLDER.sub(r"?\1", sql)


# Runs a function of the caller's sqlite3 connection where the caller uses it.
Caller = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


class CallerConnection(Connection):
    """The shared SQL (`SqlConnection`, SQLite's dialect) on the caller's own connection, in
    its open transaction: every statement goes through `run` instead of a store thread."""

    def __init__(self, caller: Caller) -> None:  # no store thread: `call` is all it uses
        self._caller = caller

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        done: T = await self._caller(fn)
        return done


def _rolled_back(conn: sqlite3.Connection) -> object:
    return conn.in_transaction and conn.execute("ROLLBACK")


class SqliteTransactions(SqliteBase):
    """`Store.step_transaction` on SQLite."""

    @asynccontextmanager
    async def _own_transaction(self) -> AsyncIterator[StoreThread]:
        """BEGIN IMMEDIATE on the transactions' connection; rolled back unless the body
        commits."""
        async with self._transacting_turn:
            thread = self._transacting
            await thread.start(self._connect)
            try:
                # Inside the try: a BEGIN that ran although its caller was cancelled is
                # rolled back too.
                await thread.call(lambda conn: conn.execute("BEGIN IMMEDIATE"))
                yield thread
            finally:
                # Shielded: cancelled before the thread took it, a ROLLBACK would never run,
                # and the transaction (with the write lock) would stay open.
                await asyncio.shield(thread.call(_rolled_back))

    async def run_insert_in(self, connection: Any, params: Sequence[RunInsertParams]) -> list[Run]:
        """In the caller's transaction on its own connection to the store's file: other
        processes see the runs once it commits (their data-version poll), never if it
        rolls back."""
        if not params:
            return []
        refuse_flow_in(params)
        now = self.clock.now(params[0].now)
        runs: list[Run] = await self._in_caller(
            connection, lambda conn: hot_path.insert_runs(conn, params, now))
        return runs

    async def step_record_in(self, connection: Any, record: StepRecordParams) -> None:
        """The entry written in the caller's open transaction, committed with its writes
        (the caller's BEGIN IMMEDIATE holds the write lock: no takeover comes between)."""
        now = self.clock.now(record.now)
        if not await self._in_caller(connection, lambda conn: hot_path.record_step(conn, record, now)):
            raise LeaseLost(record.run_id, record.fence)

    async def _in_caller(self, connection: Any, write: Callable[[sqlite3.Connection], T]) -> T:
        """`write(conn)` on the caller's connection, in its open transaction."""
        run = await self._caller(connection)
        written: T = await run(write)
        return written

    async def _caller_sql(self, connection: Any) -> CallerConnection:
        """The shared SQL in the caller's transaction (a signal, a publish). They read, then
        write what they read decides: a transaction Python's sqlite3 has not begun yet
        (it begins at the first write) is begun here, BEGIN IMMEDIATE, so that the write
        lock is held from the first read, and the caller's commit or rollback ends it."""
        return CallerConnection(await self._caller(connection, begin=True))

    async def _caller(self, connection: Any, begin: bool = False) -> Caller:
        """What runs a function of the caller's sqlite3 connection in its transaction,
        checked first: a sqlite3 connection (run on this thread, as the caller uses it),
        or aiosqlite's (SQLAlchemy's async SQLite driver: on its own thread, through its
        private `_execute`, the one way into it). InvalidInput, one line, for any other,
        one in no transaction, or one to another file."""
        if isinstance(connection, sqlite3.Connection):
            raw = connection

            async def run(fn: Callable[[sqlite3.Connection], Any]) -> Any:
                return fn(raw)
        elif type(connection).__module__.startswith("aiosqlite") and hasattr(connection, "_execute"):
            raw, driver = connection._conn, connection

            async def run(fn: Callable[[sqlite3.Connection], Any]) -> Any:
                return await driver._execute(lambda: fn(raw))
        else:
            raise InvalidInput(f"connection= on SQLite takes a sqlite3.Connection to the store's file (or "
                               f"SQLAlchemy's AsyncConnection or AsyncSession over aiosqlite), got "
                               f"{type(connection).__name__}")
        await run(lambda conn: self._check_caller(conn, begin))
        return run

    def _check_caller(self, connection: sqlite3.Connection, begin: bool) -> None:
        # Python's sqlite3 (isolation_level not None, as SQLAlchemy's driver keeps it) begins
        # the transaction at its first write, this one included: only a connection in
        # autocommit (isolation_level None) outside BEGIN would commit it at once.
        if connection.isolation_level is None and not connection.in_transaction:
            raise InvalidInput("connection= writes inside the caller's open transaction, and this "
                               "connection is in none: begin one (conn.execute('BEGIN IMMEDIATE'))")
        files = {row[2] for row in connection.execute("PRAGMA database_list") if row[2]}
        if os.path.realpath(self.path) not in {os.path.realpath(f) for f in files}:
            raise InvalidInput(f"connection= must be a connection to the store's file {self.path}; "
                               f"it is to {', '.join(sorted(files)) or 'no file'}")
        if begin and not connection.in_transaction:
            connection.execute("BEGIN IMMEDIATE")

    @asynccontextmanager
    async def step_transaction(self) -> AsyncIterator[StepTransaction]:
        async with self._own_transaction() as thread:
            held = StepTransaction(SqliteTransaction(thread))
            yield held
            record = held.record
            if record is None:
                return  # rolled back: a replay's writes never land
            now = self.clock.now(record.now)
            if not await thread.call(lambda conn: hot_path.record_step(conn, record, now)):
                raise LeaseLost(record.run_id, record.fence)
            await thread.call(lambda conn: conn.execute("COMMIT"))
        self.hub.fire(events_topic(record.run_id))
