"""The SQL store's events awaited by key: wait registrations and publishes (core._events).

A registration changes only under its run's row lock (register and close are fenced, so
they lock the run; a publish locks the runs it delivers to, in id order), so a wait is
delivered at most once and never after its close. A publish is one transaction whatever
the number of waits it delivers to: a statement per step over all of them, not per run."""

from __future__ import annotations

import json
from typing import Any, Sequence

from ...core._events import EventPublished, EventWait, delivery_key, matches, wait_signal_name
from .._event_params import (
    EventPublishParams,
    EventReclaimParams,
    EventWaitCloseParams,
    EventWaitListParams,
    EventWaitParams,
)
from .._event_rules import republished
from .._hub import QUEUED, events_topic
from . import _statements as q
from ._base import SqlBase
from ._dialect import SqlConnection

__all__ = ["SqlEvents"]

REGISTER = """
INSERT INTO event_waits (run_id, position, tenant, name, match_json, registered_at, state)
VALUES ($1, CAST($2 AS integer), $3, $4, $5, CAST($6 AS double precision), 'waiting')
ON CONFLICT (run_id, position) DO NOTHING
"""
CLOSE = "UPDATE event_waits SET state = 'closed' WHERE run_id = $1 AND position = $2 AND state = 'waiting'"
WAITS_OF_RUN = """
SELECT run_id, position, name, match_json, tenant, registered_at, state, event_id
FROM event_waits WHERE run_id = $1 ORDER BY position
"""
# The candidates, read before any lock: their runs are locked next and read again.
WAITING = f"""
SELECT DISTINCT w.run_id FROM event_waits w JOIN runs r ON r.id = w.run_id
WHERE w.tenant = $1 AND w.name = $2 AND w.state = 'waiting' AND r.state NOT IN {q.ENDED}
"""
# The runs delivered to, locked in id order (as every multi-run lock is taken); the ended
# ones are locked too, and left out.
LOCK_LIVE = f"""
SELECT id, state NOT IN {q.ENDED} FROM runs WHERE id IN_ARRAY($1) ORDER BY id FOR_UPDATE
"""
WAITING_LOCKED = """
SELECT run_id, position, match_json FROM event_waits
WHERE run_id IN_ARRAY($1) AND name = $2 AND state = 'waiting' ORDER BY run_id, position
"""
KEEP_EVENT = """
INSERT INTO published_events (tenant, id, name, data, published_at, published_by, woken, full_runs)
VALUES ($1, $2, $3, $4, CAST($5 AS double precision), $6, '[]', '[]')
ON CONFLICT (tenant, id) DO NOTHING RETURNING 1
"""
# Retention: the ids published before the store's clock ($1, else the database's) less $2.
FORGET_EVENTS = """
DELETE FROM published_events WHERE published_at < NOW($1) - CAST($2 AS double precision)
"""
EVENT_BY_ID = "SELECT name, data, woken, full_runs FROM published_events WHERE tenant = $1 AND id = $2"
EVENT_OUTCOME = "UPDATE published_events SET woken = $3, full_runs = $4 WHERE tenant = $1 AND id = $2"
PENDING_COUNTS = """
SELECT run_id, count(*) FROM signals WHERE run_id IN_ARRAY($1) AND position IS NULL AND withdrawn_at IS NULL
GROUP BY run_id
"""
LAST_SEQS = "SELECT run_id, max(seq) FROM signals WHERE run_id IN_ARRAY($1) GROUP BY run_id"
KEEP_SIGNAL = """
INSERT INTO signals (run_id, seq, name, payload, sent_at, key, sent_by)
VALUES ($1, CAST($2 AS integer), $3, $4, CAST($5 AS double precision), $6, $7)
"""
DELIVERED = """
UPDATE event_waits SET state = 'delivered', event_id = $3 WHERE run_id = $1 AND position = $2
"""
BUMP_SEQS = "UPDATE runs SET last_seq = last_seq + 1 WHERE id IN_ARRAY($1) RETURNING id, last_seq"
# As a signal's send wakes its run (sql._signals.WAKE), for every run delivered to.
WAKE = """
UPDATE runs SET
    run_at = CASE WHEN state = 'queued' AND waiting = 'signal' AND run_at > $2 THEN $2 ELSE run_at END,
    wake_requested = CASE WHEN state = 'running' THEN true ELSE wake_requested END
WHERE id IN_ARRAY($1)
"""


class SqlEvents(SqlBase):
    """Events awaited by key (`EventStore`)."""

    async def event_wait(self, params: EventWaitParams) -> bool:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return False
            await conn.execute(REGISTER, params.run_id, params.position, params.tenant or "", params.name,
                               params.match, now)
        return True

    async def event_wait_close(self, params: EventWaitCloseParams) -> bool:
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return False
            await conn.execute(CLOSE, params.run_id, params.position)
        return True

    async def event_wait_list(self, params: EventWaitListParams) -> list[EventWait]:
        async with self._reading() as conn:
            rows = await conn.fetch(WAITS_OF_RUN, params.run_id)
        return [_wait(row) for row in rows]

    async def event_publish(self, params: EventPublishParams) -> EventPublished:
        async with self._transaction() as conn:
            published = await self._publish(conn, params, self.clock.now(params.now))
        if published.woken and not published.existed:
            self.hub.fire(QUEUED)
            for run_id in published.woken:
                self.hub.fire(events_topic(run_id))
        return published

    async def event_publish_in(self, connection: Any, params: EventPublishParams) -> EventPublished:
        """In the caller's open transaction: the event is kept, and delivered, if and only if
        that transaction commits (the runs it wakes learn of it at the commit)."""
        return await self._publish(await self._caller_sql(connection), params, self.clock.now(params.now))

    async def _publish(self, conn: SqlConnection, params: EventPublishParams, now: float) -> EventPublished:
        """The publish inside `conn`'s transaction (`existed`: its id was published before)."""
        tenant = params.tenant or ""
        if await conn.fetchval(KEEP_EVENT, tenant, params.id, params.name, params.data, now,
                               params.by) is None:
            row = await conn.fetchrow(EVENT_BY_ID, tenant, params.id)
            assert row is not None  # a publish that raced this one committed it
            return republished(params, row[0], row[1], json.loads(row[2]), json.loads(row[3]))
        candidates = [row[0] for row in await conn.fetch(WAITING, tenant, params.name)]
        woken, full = await self._deliver(conn, sorted(candidates), json.loads(params.data), params, now)
        await conn.execute(EVENT_OUTCOME, tenant, params.id, json.dumps(woken), json.dumps(full))
        return EventPublished(params.id, params.name, woken, full)

    async def event_reclaim(self, params: EventReclaimParams) -> int:
        async with self._transaction() as conn:
            return await conn.execute(FORGET_EVENTS, self.clock.judged(params.now), float(params.max_age_s))

    async def _deliver(self, conn: Any, run_ids: Sequence[int], data: Any, params: EventPublishParams,
                       now: float) -> tuple[list[int], list[int]]:
        """Deliver to the fitting waits of these runs, locked first (in id order, as every
        multi-run lock is taken): the waits and runs as they stand under the lock decide."""
        if not run_ids:
            return [], []
        array = self.dialect.array(run_ids)
        live = {int(row[0]) for row in await conn.fetch(LOCK_LIVE, array) if row[1]}
        fits = [(int(row[0]), int(row[1])) for row in await conn.fetch(WAITING_LOCKED, array, params.name)
                if int(row[0]) in live and matches(json.loads(row[2]), data)]
        if not fits:
            return [], []
        ids = self.dialect.array(sorted({run_id for run_id, _ in fits}))
        pending = {int(r[0]): int(r[1]) for r in await conn.fetch(PENDING_COUNTS, ids)}
        last = {int(r[0]): int(r[1]) for r in await conn.fetch(LAST_SEQS, ids)}
        cap = params.max_pending
        signals: list[tuple[Any, ...]] = []
        delivered, full, woken = [], list[int](), list[int]()
        for run_id, position in fits:
            if pending.get(run_id, 0) >= cap:
                full.append(run_id)
                continue
            pending[run_id] = pending.get(run_id, 0) + 1
            last[run_id] = seq = last.get(run_id, 0) + 1
            signals.append((run_id, seq, wait_signal_name(position), params.data, now,
                            delivery_key(params.id, position), params.by))
            delivered.append((run_id, position, params.id))
        if signals:
            await conn.executemany(KEEP_SIGNAL, signals)
            await conn.executemany(DELIVERED, delivered)
            # One `signalled` event per delivery, as a send logs (never the data): each run's
            # first in one statement, a second wait of the same run delivered to alone.
            firsts: list[tuple[Any, ...]] = []
            logged: list[tuple[Any, ...]] = []
            seen = set[int]()
            for signal in signals:
                (firsts if signal[0] not in seen else logged).append(signal)
                seen.add(signal[0])
            bumps = await conn.fetch(BUMP_SEQS, self.dialect.array(sorted(seen)))
            bumped = {int(r[0]): int(r[1]) for r in bumps}
            rows = [(s[0], bumped[s[0]], s[1], s[2]) for s in firsts]
            for s in logged:
                rows.append((s[0], int(await conn.fetchval(q.BUMP_SEQ, s[0])), s[1], s[2]))
            await conn.executemany(q.APPEND_EVENT, [
                (run_id, seq, "signalled",
                 json.dumps({"signal": signal_seq, "name": name, "by": params.by}), now)
                for run_id, seq, signal_seq, name in rows])
            woken = sorted(seen)
            await conn.notify("events", woken)
            await conn.execute(WAKE, self.dialect.array(woken), now)
            await conn.notify("queued")
        return woken, full


def _wait(row: Sequence[Any]) -> EventWait:
    return EventWait(int(row[0]), int(row[1]), row[2], json.loads(row[3]), row[4] or None, float(row[5]),
                     row[6], row[7])
