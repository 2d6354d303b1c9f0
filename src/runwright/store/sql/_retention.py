"""The SQL store's retention: reclaiming runs and tombstones, trimming logs and histories."""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import Any

from ...core._payloads import blob_names
from .. import _rules as rules
from .._params import (
    EventsTrimmed,
    EventTrimParams,
    FlowKeyReclaimParams,
    LeaseTakeParams,
    RunReclaimed,
    RunReclaimParams,
    ThreadMessagesTrimmed,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
    TombstonesReclaimed,
)
from . import _statements as q
from ._base import SqlBase
from ._dialect import SqlConnection

__all__ = ["SqlRetention"]


class SqlRetention(SqlBase):
    """Retention (`RetentionStore`)."""

    # -- retention ----------------------------------------------------------------------

    async def lease_take(self, params: LeaseTakeParams) -> bool:
        return await self._change(q.LEASE_TAKE, params.name, params.holder,
                                  self.clock.judged(params.now), params.lease_s) == 1

    def _judged_here(self, given: float | None) -> float | None:
        """The time a retention statement judges ages by: None for "the database's clock,
        read in the statement" (see runwright.core._clock), else the injected one."""
        return self.clock.judged(given)

    async def run_reclaim(self, params: RunReclaimParams) -> RunReclaimed:
        age_s = None if params.max_age_s is None else float(params.max_age_s)
        ended_before = None if params.ended_before is None else float(params.ended_before)
        judged = self._judged_here(params.now)
        async with self._reading() if params.dry_run else self._transaction() as conn:
            if params.run_ids is None:
                rows = await conn.fetch(q.RECLAIMABLE, ended_before, params.limit, judged, age_s)
            else:
                rows = await conn.fetch(q.RECLAIMABLE_OF, ended_before, params.limit, judged, age_s,
                                        self.dialect.array(list(params.run_ids)))
            ids = [row[0] for row in rows]
            return await self._reclaim(conn, ids, params.dry_run, q.RECLAIM_OLD, ended_before, judged, age_s)

    async def thread_run_reclaim(self, params: ThreadRunReclaimParams) -> RunReclaimed:
        async with self._reading() if params.dry_run else self._transaction() as conn:
            ids = [row[0] for row in await conn.fetch(q.THREAD_RUNS_BEYOND, params.keep, params.limit)]
            if ids and not params.dry_run:
                ids = [row[0] for row in await conn.fetch(q.RECLAIM_LOCK, self.dialect.array(ids))]
            return await self._reclaim(conn, ids, params.dry_run, q.RECLAIM_CAPPED, params.keep,
                                       max(params.keep - 1, 0))

    async def _reclaim(self, conn: SqlConnection, ids: list[int], dry_run: bool, remove: str,
                       *judged_by: Any) -> RunReclaimed:
        """Remove these ended runs with their journal, log, questions and their events'
        numbers in a thread's log; widen the reclaimed ranges by them. `remove` (with the
        ids, then `judged_by`) deletes the runs that still qualify, judged again in that
        statement: only what it returns goes (see RECLAIM_OLD)."""
        if not ids:
            return RunReclaimed()
        if not dry_run:
            gone = await conn.fetch(remove, self.dialect.array(ids), *judged_by)
            ids = sorted(row[0] for row in gone)
            if not ids:
                return RunReclaimed()
        array = self.dialect.array(ids)
        steps = int(await conn.fetchval("SELECT count(*) FROM steps WHERE run_id IN_ARRAY($1)", array))
        events = int(await conn.fetchval("SELECT count(*) FROM events WHERE run_id IN_ARRAY($1)", array))
        if not dry_run:
            for table in ("steps", "events", "questions", "thread_events", "signals", "event_waits"):
                await conn.execute(f"DELETE FROM {table} WHERE run_id IN_ARRAY($1)", array)
            if self.forget_keys is not None:
                await conn.execute(self.forget_keys, self.dialect.array([row[1] for row in gone]),
                                   self.dialect.array([row[2] for row in gone]))
            await self._widen_reclaimed(conn, ids)
        return RunReclaimed(ids, steps, events)

    async def _widen_reclaimed(self, conn: SqlConnection, ids: list[int]) -> None:
        """Rewrite the reclaimed ranges with `ids` added (rules.merge_ranges), one rewrite
        at a time (see _lock_reclaimed): two passes that both read the ranges and both
        rewrote them would lose one's ids, or collide on a range's first id."""
        await self._lock_reclaimed(conn)
        ranges = [(row[0], row[1]) for row in await conn.fetch("SELECT lo, hi FROM reclaimed")]
        await conn.execute("DELETE FROM reclaimed")
        await conn.executemany("INSERT INTO reclaimed (lo, hi) VALUES ($1, $2)",
                               rules.merge_ranges(ranges, ids))

    async def _lock_reclaimed(self, conn: SqlConnection) -> None:
        """Hold the reclaimed ranges until the transaction ends, against another rewrite
        (the dialect's own; SQLite's write transaction already holds the whole database)."""
        return None

    async def event_trim(self, params: EventTrimParams) -> EventsTrimmed:
        # One transaction a batch (a commit a run was 70 s a pass on a loaded PostgreSQL).
        # The runs are locked as they are chosen, skipping those another transaction
        # holds (a completer, an append: trimmed next pass), so the trim waits on no run's
        # lock and cannot be one end of a deadlock.
        found = EventsTrimmed()
        async with self._reading() if params.dry_run else self._transaction() as conn:
            for run_id, last_seq, trimmed_seq in await conn.fetch(q.TRIMMABLE, params.keep, params.limit):
                cut = rules.trim_marker(last_seq, trimmed_seq, params.keep)
                if cut is not None and (params.dry_run or await self._trim(conn, run_id, *cut, params.now)):
                    found.run_ids.append(run_id)
                    found.events += cut[0] - trimmed_seq
        return found

    async def _trim(self, conn: SqlConnection, run_id: int, marker: int, data: dict[str, int],
                    now: float | None) -> bool:
        if not await conn.execute(q.TRIM_MARK, run_id, marker):
            return False  # trimmed as far already
        await conn.execute(q.TRIM_EVENTS, run_id, marker)
        await conn.execute(q.TRIM_THREAD_EVENTS, run_id, marker)
        await conn.execute(q.TRIM_MARKER, run_id, marker, rules.TRIMMED, json.dumps(data),
                           self.clock.now(now))
        return True

    async def blob_references(self) -> set[str]:
        # Every text column of every table, filtered by the database to the values that
        # hold an envelope at all: the columns are read from the catalog, so a payload
        # column a migration adds is read without anyone listing it.
        names: set[str] = set()
        async with self._reading() as conn:
            for table, column in await self._text_columns(conn):
                rows = await conn.fetch(f"SELECT CAST({column} AS TEXT) FROM {table} "
                                        f"WHERE CAST({column} AS TEXT) LIKE '%~rw1%'")
                for row in rows:
                    names |= blob_names(row[0])
        return names

    @abstractmethod
    async def _text_columns(self, conn: SqlConnection) -> list[tuple[str, str]]:
        """The dialect's own: (table, column) of every column that may hold text, from its
        catalog."""

    async def run_was_reclaimed(self, run_id: int) -> bool:
        return bool(await self._fetch(q.RECLAIMED_HAS, run_id))

    async def flow_key_reclaim(self, params: FlowKeyReclaimParams) -> int:
        judged = self._judged_here(params.now)
        async with self._reading() if params.dry_run else self._transaction() as conn:
            slots = [row[0] for row in await conn.fetch(q.FLOW_UNNEEDED, judged, params.limit)]
            if params.dry_run or not slots:
                return len(slots)
            return len(await conn.fetch(q.FLOW_RECLAIM, self.dialect.array(slots), judged))

    async def thread_tombstone_reclaim(self, params: ThreadTombstoneReclaimParams) -> TombstonesReclaimed:
        judged, age_s = self._judged_here(params.now), float(params.max_age_s)
        async with self._reading() if params.dry_run else self._transaction() as conn:
            rows = await conn.fetch(q.TOMBSTONES, judged, age_s, params.limit)
            if not params.dry_run:
                rows = [row for row in rows
                        if await self._drop_tombstone(conn, row[0], row[1], judged, age_s)]
        return TombstonesReclaimed([(row[0] or None, row[1]) for row in rows])

    async def _drop_tombstone(self, conn: SqlConnection, tenant: str, thread: str,
                              judged: float | None, age_s: float) -> bool:
        """Remove the tombstone if it still qualifies (TOMBSTONE_DROP judges again), then
        the thread's history and log."""
        if not await conn.execute(q.TOMBSTONE_DROP, tenant, thread, judged, age_s):
            return False
        await conn.execute(q.TOMBSTONE_MESSAGES_DROP, tenant, thread)
        await conn.execute(q.TOMBSTONE_EVENTS_DROP, tenant, thread)
        return True

    async def thread_message_trim(self, params: ThreadMessageTrimParams) -> ThreadMessagesTrimmed:
        async with self._reading() if params.dry_run else self._transaction() as conn:
            rows = [tuple(row) for row in await conn.fetch(q.MESSAGES_BEYOND, params.keep, params.limit)]
            if rows and not params.dry_run:
                rows = await self._messages_of_held_runs(conn, rows)
                await conn.executemany(q.MESSAGE_DROP, rows)
        threads = list(dict.fromkeys((row[0] or None, row[1]) for row in rows))
        return ThreadMessagesTrimmed(threads, len(rows))

    async def _messages_of_held_runs(self, conn: SqlConnection, rows: list[tuple[Any, ...]],
                                     ) -> list[tuple[Any, ...]]:
        """Of the chosen messages, those whose run is gone or is ended and held by this
        transaction now: a retry cannot make it open until the trim is over (MESSAGE_DROP
        judges again that it is not open)."""
        run_ids = self.dialect.array(sorted({row[2] for row in rows}))
        present = {row[0] for row in await conn.fetch(q.MESSAGE_RUNS, run_ids)}
        held = {row[0] for row in await conn.fetch(q.MESSAGE_RUNS_LOCK, run_ids)}
        return [row for row in rows if row[2] not in present or row[2] in held]
