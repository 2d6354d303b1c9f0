"""The SQLite store's hot path of runs: submit, claim, extend and finish, the journal and
event appends; each one trip to the hot connection's thread (see `hot_path`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Iterable, Sequence

from ...runs import Run
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import (
    EventAppendParams,
    RunClaimParams,
    RunExtendParams,
    RunExtendResult,
    RunFinishParams,
    RunInsertParams,
    StepRecordParams,
)
from . import _hot_path as hot_path
from ._base import SqliteBase

__all__ = ["SqliteRuns"]


class SqliteRuns(SqliteBase):
    """The hot path (`RunStore`'s and `JournalStore`'s; the rest is `..sql`)."""

    async def run_insert_many(self, items: Iterable[RunInsertParams]) -> list[Run]:
        params = list(items)
        if not params:
            return []
        now = self.clock.now(params[0].now)
        runs = await self._hot.write(lambda conn: hot_path.insert_runs(conn, params, now))
        self.hub.fire(QUEUED)
        return runs

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        due = _Due(params, self.clock.now(params.now))

        def claim(conn: sqlite3.Connection) -> list[Run]:
            # A read without the write lock first: idle pollers of many processes must not
            # queue up on BEGIN IMMEDIATE just to learn that nothing is due.
            if not due.ids(conn, 1):
                return []
            conn.execute("BEGIN IMMEDIATE")
            try:
                runs = due.claim(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return runs

        return _in_claim_order(await self._hot.call(claim))

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        # One write transaction, one trip to the store's thread: the claim sees the
        # queue as the finishes leave it.
        if not params:
            return [], await self.run_claim(claim)
        now, due = self.clock.now(params[0].now), _Due(claim, self.clock.now(claim.now))
        refused, runs = await self._hot.write(
            lambda conn: (hot_path.finish_runs(conn, params, now), due.claim(conn)))
        self.hub.fire_finished(params)
        return refused, _in_claim_order(runs)

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        now = self.clock.now(params.now)
        wanted = json.dumps([list(pair) for pair in params.runs])

        def extend(conn: sqlite3.Connection) -> list[tuple[int, int]]:
            return conn.execute(
                "UPDATE runs SET lease_expires_at = ? WHERE state = 'running' AND owner = ?"
                " AND (id, fence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))"
                " RETURNING id, cancel_requested",
                (now + params.lease_s, params.worker_id, wanted)).fetchall()

        rows = await self._hot.write(extend) if params.runs else []
        kept = {run_id for run_id, _ in rows}
        return RunExtendResult(
            lost=[run_id for run_id, _ in params.runs if run_id not in kept],
            cancel_requested=[run_id for run_id, flag in rows if flag],
        )

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        now = self.clock.now(params[0].now)
        refused = await self._hot.write(lambda conn: hot_path.finish_runs(conn, params, now))
        self.hub.fire_finished(params)
        return refused

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        if not params:
            return []
        rules.check_one_step_per_run(params)
        now = self.clock.now(params[0].now)
        recorded = await self._hot.write(lambda conn: [hot_path.record_step(conn, p, now) for p in params])
        for p in params:
            self.hub.fire(events_topic(p.run_id))
        return recorded

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        now = self.clock.now(params.now)
        seqs = await self._hot.write(lambda conn: hot_path.append_fenced(conn, params, now))
        self.hub.fire(events_topic(params.run_id))
        return seqs


class _Due:
    """The due runs a claim takes, read in the write transaction that claims them."""

    # One probe per queue: `queue = ?` lets SQLite walk runs_due in claim order and stop
    # after `limit` rows; `queue IN (...)` would make it sort every queued run.
    # A thread's run waits while another run of its thread (same tenant) is running, or
    # queued ahead of it in the thread's order, (turn, id) (rules.thread_turn; a NULL turn
    # is the id): runs of one thread never overlap, and take their turns in order.
    # Past its deadline, a run is the rescuer's to end, not a worker's to start.
    # A queue the claim's fleet (?6, its root; NULL: none) paused yields nothing, for a
    # worker that has not heard of the pause too (a constant subquery: once per probe).
    REGISTERED = "SELECT 1 FROM workers WHERE id = ?"
    PROBE = ("SELECT id, priority, run_at FROM runs r WHERE state = 'queued' AND queue = ?1"
             " AND NOT EXISTS (SELECT 1 FROM fleet_paused_queues WHERE root = ?6 AND queue = ?1)"
             " AND run_at <= ?2 AND task IN (SELECT value FROM json_each(?3))"
             # Only a major the task's code can run (a run that recorded none: any).
             " AND (?5 IS NULL OR major IS NULL"
             "  OR major || ':' || task IN (SELECT value FROM json_each(?5)))"
             " AND (deadline_at IS NULL OR deadline_at >= ?2)"
             " AND (thread IS NULL OR NOT EXISTS (SELECT 1 FROM runs o WHERE o.thread = r.thread"
             "  AND o.tenant IS r.tenant AND o.id <> r.id AND o.state IN ('queued', 'running')"
             "  AND (o.state = 'running' OR coalesce(o.turn, o.id) < coalesce(r.turn, r.id)"
             "   OR (coalesce(o.turn, o.id) = coalesce(r.turn, r.id) AND o.id < r.id))))"
             " ORDER BY priority, run_at, id LIMIT ?4")

    def __init__(self, params: RunClaimParams, now: float) -> None:
        self.params = params
        self.now = now
        self.tasks = json.dumps(list(params.tasks))
        self.keys = None if params.majors is None else json.dumps(rules.claim_keys(params.majors))

    def ids(self, conn: sqlite3.Connection, limit: int) -> list[int]:
        found = [row for queue in self.params.queues for row in conn.execute(
            self.PROBE, (queue, self.now, self.tasks, limit, self.keys, self.params.fleet)).fetchall()]
        found.sort(key=lambda row: (row[1], row[2], row[0]))
        return [row[0] for row in found[:limit]]

    def claim(self, conn: sqlite3.Connection) -> list[Run]:
        """Inside a write transaction. Only a registered worker claims: one declared dead
        (its row deleted) that still runs takes nothing until its heartbeat registers it
        again (a rescuer's delete and this look take turns on the write lock)."""
        p = self.params
        if conn.execute(self.REGISTERED, (p.worker_id,)).fetchone() is None:
            return []
        return hot_path.claim_ids(conn, self.ids(conn, p.limit), p.worker_id, p.lease_s, self.now)


def _in_claim_order(runs: list[Run]) -> list[Run]:
    runs.sort(key=lambda r: (r.priority, r.run_at, r.id))  # RETURNING has no order
    return runs
