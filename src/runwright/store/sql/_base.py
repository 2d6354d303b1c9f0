"""What the mixins of the SQL store share (see `shared` for the dialect's half and the
shared one)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, AsyncContextManager, Sequence

from ...core._clock import Clock
from ...errors import RunNotFound, StoreError
from ...runs import Run, RunState
from .._hub import Hub
from .._migrations import Migration
from .._params import RunInsertParams, RunRescueParams, ThreadInfo
from . import _statements as q
from ._columns import run_from_row
from ._dialect import Dialect, SqlConnection

__all__ = ["SqlBase"]


class SqlBase(ABC):
    """What the concerns' mixins of `SqlStore` share: the attributes a dialect's store sets,
    the dialect's half (see `shared`), and the helpers several concerns write with."""

    url: str
    hub: Hub
    clock: Clock
    dialect: Dialect
    migrations: list[Migration]
    whole_schema: Migration  # schema.sql: what the migrations build (see migrate)
    schema_version_known: int
    schema_noun = "schema"
    where: str  # names the database in messages ("schema 'x'", "file.db")
    # Where a run is found by its key, and what frees the keys of runs about to be removed:
    # an index on runs by default (its entries go with the rows); PostgreSQL keeps keys in
    # a table of their own (see its migration 16).
    get_by_key: str = q.GET_BY_KEY
    forget_keys: str | None = None
    keeps_transactions = True  # the application's writes and ours in one transaction
    # A claim as large as a worker's free slots: the database's other sessions (SQLite's
    # other processes between transactions) go on meanwhile, and a worker of 500 slots
    # drained 1.6x (PostgreSQL) and 1.5x (SQLite) as fast as one of 64, 2 workers each.
    claim_most: int | None = None

    # -- the dialect's half -------------------------------------------------------------

    @abstractmethod
    def _reading(self) -> AsyncContextManager[SqlConnection]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    def _transaction(self) -> AsyncContextManager[SqlConnection]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _caller_sql(self, connection: Any) -> SqlConnection:
        """The dialect's own: the caller's open transaction on `connection` (its driver's
        connection, unwrapped from SQLAlchemy's) as a SqlConnection, for a write of the
        shared SQL inside it (a signal, a publish); InvalidInput, one line, for a
        connection of another kind, in no transaction, or to another database."""

    @abstractmethod
    async def _insert_runs(self, conn: SqlConnection, params: Sequence[RunInsertParams],
                           now: float) -> list[Run]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _dead_worker_ids(self, conn: SqlConnection, params: RunRescueParams,
                               now: float) -> list[int]:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _schema_table_exists(self, conn: SqlConnection) -> bool:
        """The dialect's own (see the module docstring)."""

    @abstractmethod
    async def _apply_migration(self, conn: SqlConnection, migration: Migration) -> None:
        """The dialect's own (see the module docstring)."""

    async def _before_migrate(self, conn: SqlConnection) -> None:
        """Anything the dialect must do first in the migrating transaction (SQLite needs
        nothing; PostgreSQL takes the migrators' lock and makes its schema)."""
        return None

    def _rolled_back(self, exc: StoreError) -> bool:
        """Whether `exc` is a conflict the database rolled back whole (a deadlock, a
        serialization failure), which the same operation may simply try again."""
        return False

    async def _fetch(self, sql: str, *args: Any) -> list[Sequence[Any]]:
        async with self._reading() as conn:
            return await conn.fetch(sql, *args)

    async def _log(self, conn: SqlConnection, run_id: int, kind: str, data: dict[str, Any],
                   now: float) -> None:
        """Append one event to a run's log, under the run's row lock (unfenced: for the
        changes the store itself makes, such as a cancel or a retry)."""
        seq = await conn.fetchval(q.BUMP_SEQ, run_id)
        await conn.execute(q.APPEND_EVENT, run_id, seq, kind, json.dumps(data), now)
        await conn.notify("events", [run_id])

    async def _log_bumped(self, conn: SqlConnection, runs: Sequence[Run],
                          kinds: Sequence[tuple[str, dict[str, Any]]], now: float) -> None:
        """Log one event per run whose last_seq the caller's UPDATE already bumped."""
        await conn.executemany(q.APPEND_EVENT, [(run.id, run.last_seq, kind, json.dumps(data), now)
                                                for run, (kind, data) in zip(runs, kinds)])
        await conn.notify("events", [run.id for run in runs])

    async def _wake_parents(self, conn: SqlConnection, runs: Sequence[Run], now: float) -> None:
        parents = [run.parent_id for run in runs if run.parent_id is not None]
        if parents:
            await conn.execute(q.WAKE_PARENTS, self.dialect.array(parents), now)
            await conn.notify("queued")

    async def _locked_run(self, conn: SqlConnection, run_id: int) -> Run:
        row = await conn.fetchrow(q.LOCK_RUN, run_id)
        if row is None:
            raise RunNotFound(f"run {run_id} not found")
        return run_from_row(row)

    async def _end_queued(self, conn: SqlConnection, run_id: int, state: RunState, now: float,
                          kind: str, data: dict[str, Any], *, error: str | None = None,
                          interrupt: str | None = None) -> None:
        await conn.execute(q.END_QUEUED, run_id, state.value, now, error, interrupt)
        await self._log(conn, run_id, kind, data, now)
        await conn.notify("done", [run_id])

    async def _thread_get(self, conn: SqlConnection, tenant: str | None, thread: str) -> ThreadInfo | None:
        row = await conn.fetchrow(q.THREAD_GET, tenant or "", thread)
        return None if row is None else _thread_info(row)

    async def _change(self, sql: str, *args: Any) -> int:
        async with self._transaction() as conn:
            return await conn.execute(sql, *args)


# -- helpers --------------------------------------------------------------------------


def _thread_info(row: Sequence[Any]) -> ThreadInfo:
    """A thread from a row of THREAD_GET's columns."""
    deleted_at = None if row[4] is None else float(row[4])
    return ThreadInfo(row[0], row[1] or None, int(row[2]), float(row[3]), deleted_at)
