"""The store operations both SQL dialects share, written once over `SqlConnection`.

A dialect (sqlite/, postgres/) gives connections (`_reading`, `_transaction`), its hot
path (submit, claim, renew, finish, journal and event appends, each one round trip
tuned for its database), how it tells a dead worker (`_dead_worker_ids`), and how it
reads and applies schema versions. Everything else, which is where the rules are, lives
here: it asks `rules` for the decision and applies it in the transaction it read in.

That half is written by concern, one mixin a module of this folder (runs, forks, journal, threads,
questions, signals, retention, schedules, queues, workers, limits, over `base`), composed below as
the interface composes its protocols; the schema's operations are here.
"""

from __future__ import annotations

from .. import _rules as rules
from .._moved import MARK, refusal_of_mark
from ._events import SqlEvents
from ._forks import SqlForks
from ._journal import SqlJournal
from ._limits import SqlLimits
from ._questions import SqlQuestions
from ._queues import SqlQueues
from ._retention import SqlRetention
from ._runs import SqlRuns
from ._schedules import SqlSchedules
from ._signals import SqlSignals
from ._threads import SqlThreads
from ._workers import SqlWorkers

__all__ = ["SqlStore"]

LEASES_SINCE = 10  # the migration that made `leases`, where a move keeps its mark


class SqlStore(SqlRuns, SqlForks, SqlJournal, SqlThreads, SqlQuestions, SqlSignals, SqlEvents, SqlRetention,
               SqlSchedules, SqlQueues, SqlWorkers, SqlLimits):
    """The shared half of a SQL store; see the module docstring for the dialect's half."""

    # -- schema -------------------------------------------------------------------------

    async def schema_version(self) -> int:
        async with self._reading() as conn:
            if not await self._schema_table_exists(conn):
                return 0
            return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions"))

    async def require_schema(self) -> None:
        rules.check_schema_current(await self.schema_version(), self.schema_version_known, self.where)

    # False only in `runwright move`, which opens a sealed or receiving store on purpose.
    heed_moves = True

    async def _check_schema_known(self) -> None:
        version = await self.schema_version()
        rules.check_schema_known(version, self.schema_version_known, self.where)
        if self.heed_moves and version >= LEASES_SINCE:
            # Once, at open: a store `runwright move` sealed or left as a tombstone says
            # where the deployment went before this process writes anything to it.
            async with self._reading() as conn:
                holder = await conn.fetchval("SELECT holder FROM leases WHERE name = $1", MARK)
            moved = refusal_of_mark(holder)
            if moved is not None:
                raise moved

    async def migrate(self, upto: int | None = None) -> list[int]:
        """Apply the migrations this database lacks, up to version `upto` (default: all),
        in one transaction; the versions applied."""
        async with self._transaction() as conn:
            await self._before_migrate(conn)
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (version integer PRIMARY KEY,"
                               " name text NOT NULL, applied_at double precision NOT NULL)")
            current = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions"))
            rules.check_schema_known(current, self.schema_version_known, self.where)
            pending = self.migrations[current:upto]
            # From nothing to the last, the schema whole: one script, a fraction of the
            # steps' DDL (PostgreSQL: 45 -> 32 ms, most of opening a fresh database).
            whole = current == 0 and pending and pending[-1].version == self.whole_schema.version
            for migration in [self.whole_schema] if whole else pending:
                await self._apply_migration(conn, migration)
            if pending:
                now = self.clock.now()
                await conn.executemany("INSERT INTO schema_versions VALUES ($1, $2, $3)",
                                       [(m.version, m.name, now) for m in pending])
            return [m.version for m in pending]
