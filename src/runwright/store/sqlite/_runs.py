"""The SQLite store's hot path of runs: submit, claim, extend and finish, the journal and
event appends; each one trip to the hot connection's thread (see `hot_path`)."""

from __future__ import annotations

import heapq
import json
import sqlite3
from typing import Iterable, Iterator, Sequence

from ...runs import Run
from .. import _fair_rules as fair_rules
from .. import _limit_rules as limit_rules
from .. import _rate_rules as rate_rules
from .. import _rules as rules
from .._flow_rules import has_flow
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
from ..sql._flow import SqlFlow
from . import _hot_path as hot_path
from ._base import SqliteBase

__all__ = ["SqliteRuns"]


class SqliteRuns(SqliteBase, SqlFlow):
    """The hot path (`RunStore`'s and `JournalStore`'s; the rest is `..sql`)."""

    async def run_insert_many(self, items: Iterable[RunInsertParams]) -> list[Run]:
        params = list(items)
        if not params:
            return []
        if has_flow(params):  # opt-in: decided under its keys' lock (sql._flow)
            return await self._insert_flowed(params)
        now = self.clock.now(params[0].now)
        runs = await self._hot.write(lambda conn: hot_path.insert_runs(conn, params, now))
        self.hub.fire(QUEUED)
        return runs

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        due = _Due(params, self.clock.now(params.now))

        def claim(conn: sqlite3.Connection) -> list[Run]:
            # A read without the write lock first: idle pollers of many processes must not
            # queue up on BEGIN IMMEDIATE just to learn that nothing is due.
            if not due.ids(conn, 1) and not due.limited_waiting(conn):
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
    # A run that carries concurrency limits is the limited claim's (LIMITED below), never
    # this one's: a filter on the row the walk reads anyway, so runs without limits pay
    # nothing for it.
    PROBE = ("SELECT id, priority, run_at FROM runs r WHERE state = 'queued' AND queue = ?1"
             " AND limits IS NULL"
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
    # The due runs of limited tasks that carry limits (runs_limited_due), walked in claim
    # order with the same conditions, as long as the pick wants more (no LIMIT: a run
    # held back by its key does not stop the walk before the runs of other keys).
    # ?7: the limits texts of keys full now (limit_rules.full), left out of the walk, so
    # a backlog of one full key is stepped over by SQLite, not decoded row by row.
    # Each names its index: SQLite's planner, given runs_limited_at (queue, run_at) too,
    # took it for this walk and sorted every due run of the queue at every claim.
    LIMITED = (PROBE.replace("SELECT id, priority, run_at FROM runs r",
                             "SELECT id, priority, run_at, limits FROM runs r INDEXED BY runs_limited_due")
               .replace("AND limits IS NULL",
                        "AND limits IS NOT NULL AND limits NOT IN (SELECT value FROM json_each(?7))")
               .replace(" LIMIT ?4", ""))
    # The first runs of one limits text (?7; ?4 of them) a claim may take, along
    # runs_limited_keys (limit_rules.heads: read when the claim holds keys back, so no
    # full key's backlog is stepped over); any of the claim's queues (?1, JSON).
    HEADS = (PROBE.replace("SELECT id, priority, run_at FROM runs r",
                           "SELECT id, priority, run_at, limits FROM runs r INDEXED BY runs_limited_keys")
             .replace("WHERE root = ?6 AND queue = ?1", "WHERE root = ?6 AND queue = r.queue")
             .replace("AND queue = ?1", "AND limits = ?7 AND queue IN (SELECT value FROM json_each(?1))")
             .replace("AND limits IS NULL", "AND limits IS NOT NULL"))
    # The distinct limits texts of the queued runs, at most ?1 (limit_rules.TEXTS_CAP): a
    # loose scan of runs_limited_keys, one probe a text however many runs each has (named:
    # the planner's statistics would have it read runs_state, every queued run, and sort).
    TEXTS = ("WITH RECURSIVE texts(l, n) AS ("
             " SELECT (SELECT limits FROM runs INDEXED BY runs_limited_keys WHERE state = 'queued'"
             "  AND limits IS NOT NULL ORDER BY limits LIMIT 1), 1"
             " UNION ALL SELECT (SELECT limits FROM runs INDEXED BY runs_limited_keys WHERE state = 'queued'"
             "  AND limits IS NOT NULL AND limits > texts.l ORDER BY limits LIMIT 1), n + 1"
             " FROM texts WHERE l IS NOT NULL AND n < ?1)"
             " SELECT l FROM texts WHERE l IS NOT NULL")
    RUNNING_LIMITS = "SELECT limits FROM runs WHERE state = 'running' AND limits IS NOT NULL"
    OVERRIDES = "SELECT target, max FROM limit_overrides"
    # The passes of fair keys and V (store._fair_rules), kept in flow_keys.
    FAIR_STATE = "SELECT slot, at FROM flow_keys WHERE slot IN (SELECT value FROM json_each(?))"
    FAIR_SET = ("INSERT INTO flow_keys (slot, at) VALUES (?, ?)"
                " ON CONFLICT (slot) DO UPDATE SET at = excluded.at")
    # Rates per key (store._rate_rules): a key's spends in their window, read once a claim
    # for each key it meets; the spends of the runs it started, written in its transaction,
    # and those whose window ended, dropped then (rate_spent_until).
    RATE_LOG = ("SELECT slot, until, cost FROM rate_spent"
                " WHERE slot IN (SELECT value FROM json_each(?1)) AND until > ?2")
    RATE_SPEND = "INSERT OR IGNORE INTO rate_spent (slot, until, cost, run_id) VALUES (?, ?, ?, ?)"
    RATE_PRUNE = "DELETE FROM rate_spent WHERE until <= ?"

    def __init__(self, params: RunClaimParams, now: float) -> None:
        self.params = params
        self.now = now
        self.tasks = json.dumps(list(params.tasks))
        self.keys = None if params.majors is None else json.dumps(rules.claim_keys(params.majors))
        self.limited = json.dumps(list(params.limited)) if params.limited else None
        self.fair: fair_rules.FairState | None = None  # read by a fair claim that read heads
        self.fair_limits: dict[int, str | None] = {}
        self.overrides: dict[str, int] = {}
        self.book: rate_rules.Book | None = None  # the limited claim's rates, once it ran

    def limited_rows(self, conn: sqlite3.Connection, want: int) -> list[tuple[int, int, float]]:
        """The limited runs a claim takes (limit_rules.pick), in the write transaction:
        the runs running under each key are counted as the claim sees them."""
        if self.limited is None or want <= 0:
            return []
        texts = [row[0] for row in conn.execute(self.RUNNING_LIMITS)]
        running = limit_rules.running_by_slot(texts)
        overrides = {target: cap for target, cap in conn.execute(self.OVERRIDES)}
        self.book = rate_rules.Book(self.now, overrides, lambda slots: self._rate_logs(conn, slots))
        held = limit_rules.full(texts, running, overrides)
        p = self.params
        # The heads of each key's runs, where a walk would step over backlogs; a fair
        # claim needs each key's first runs to take them in turns (store._fair_rules).
        if held or p.fair:
            queued = [row[0] for row in conn.execute(self.TEXTS, (limit_rules.TEXTS_CAP,))]
            if len(queued) < limit_rules.TEXTS_CAP:
                return self._heads(conn, limit_rules.heads(queued, held, running, overrides, want),
                                   running, overrides, want, held)
        walks = [conn.execute(self.LIMITED, (queue, self.now, self.limited, None, self.keys, p.fleet,
                                             json.dumps(sorted(held))))
                 for queue in p.queues]
        due = heapq.merge(*walks, key=lambda row: (row[1], row[2], row[0]))
        order = {}

        def candidates() -> Iterator[tuple[int, str | None]]:
            for row in due:
                order[row[0]] = (row[0], row[1], row[2])
                yield row[0], row[3]

        try:
            taken = limit_rules.pick(candidates(), running, overrides, want, held, self.book)
            return [order[run_id] for run_id in taken]
        finally:
            for walk in walks:  # before the claim's UPDATE on this connection
                walk.close()

    def _heads(self, conn: sqlite3.Connection, heads: list[tuple[str, int]], running: dict[str, int],
               overrides: dict[str, int], want: int, held: set[str]) -> list[tuple[int, int, float]]:
        """The runs a claim takes of the first runs of each text of `heads`, merged in
        claim order (limit_rules.heads)."""
        queues = json.dumps(list(self.params.queues))
        firsts = [conn.execute(self.HEADS, (queues, self.now, self.limited, n, self.keys, self.params.fleet,
                                            text)).fetchall() for text, n in heads]
        order = {row[0]: (row[0], row[1], row[2]) for row in heapq.merge(
            *firsts, key=lambda row: (row[1], row[2], row[0]))}
        rows = {row[0]: row[3] for first in firsts for row in first}
        ids: list[int] = list(order)
        if self.params.fair:  # the fair runs' places given to their keys in turns
            self.fair = fair_rules.FairState(dict(conn.execute(self.FAIR_STATE, (json.dumps(
                [fair_rules.VT, *fair_rules.slots_of(rows.values())]),)).fetchall()))
            self.fair.vt = self.fair.passes.pop(fair_rules.VT, 0.0)
            self.fair_limits, self.overrides = rows, overrides
            ids = fair_rules.order(ids, [rows[i] for i in ids], [order[i][1] for i in ids], self.fair,
                                   overrides)
        taken = limit_rules.pick(((run_id, rows[run_id]) for run_id in ids), running, overrides, want, held,
                                 self.book)
        return [order[run_id] for run_id in taken]

    def _rate_logs(self, conn: sqlite3.Connection, slots: list[str]) -> dict[str, list[tuple[float, float]]]:
        logs: dict[str, list[tuple[float, float]]] = {}
        for s, until, cost in conn.execute(self.RATE_LOG, (json.dumps(slots), self.now)).fetchall():
            logs.setdefault(s, []).append((until, cost))
        return logs

    def limited_waiting(self, conn: sqlite3.Connection) -> bool:
        return self.limited is not None and any(
            conn.execute(self.LIMITED + " LIMIT 1", (queue, self.now, self.limited, None, self.keys,
                                                     self.params.fleet, "[]")).fetchone()
            for queue in self.params.queues)

    def ids(self, conn: sqlite3.Connection, limit: int) -> list[int]:
        return [row[0] for row in self.rows(conn, limit)]

    def rows(self, conn: sqlite3.Connection, limit: int) -> list[tuple[int, int, float]]:
        found = [row for queue in self.params.queues for row in conn.execute(
            self.PROBE, (queue, self.now, self.tasks, limit, self.keys, self.params.fleet)).fetchall()]
        found.sort(key=lambda row: (row[1], row[2], row[0]))
        return found[:limit]

    def claim(self, conn: sqlite3.Connection) -> list[Run]:
        """Inside a write transaction. Only a registered worker claims: one declared dead
        (its row deleted) that still runs takes nothing until its heartbeat registers it
        again (a rescuer's delete and this look take turns on the write lock)."""
        p = self.params
        if conn.execute(self.REGISTERED, (p.worker_id,)).fetchone() is None:
            return []
        rows = self.rows(conn, p.limit)
        if self.limited is not None:
            # Both kinds in one claim order: a limited run is not put behind runs without
            # limits that come after it.
            limited = self.limited_rows(conn, p.limit)
            if self.fair is None:
                rows = sorted(rows + limited, key=lambda r: (r[1], r[2], r[0]))[:p.limit]
            else:  # the limited rows in their fair order, merged among the others
                rows = list(heapq.merge(rows, limited, key=lambda r: (r[1], r[2], r[0])))[:p.limit]
        runs = hot_path.claim_ids(conn, [row[0] for row in rows], p.worker_id, p.lease_s, self.now)
        if self.fair is not None:  # the fair keys of the runs claimed, in the claim's order
            claimed = {run.id for run in runs}
            taken = (self.fair_limits.get(r[0]) for r in rows if r[0] in claimed)
            served = fair_rules.served(taken, self.fair, self.overrides)
            conn.executemany(self.FAIR_SET, served.changed.items())
        if self.book is not None and self.book.spends:
            # Only the runs claimed spend (the pick may have taken more than the claim kept).
            conn.execute(self.RATE_PRUNE, (self.now - rate_rules.PRUNE_AFTER_S,))
            conn.executemany(self.RATE_SPEND, self.book.written(run.id for run in runs))
        return runs


def _in_claim_order(runs: list[Run]) -> list[Run]:
    runs.sort(key=lambda r: (r.priority, r.run_at, r.id))  # RETURNING has no order
    return runs
