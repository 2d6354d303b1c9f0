"""The PostgreSQL store's signals: a send and a take in as few round trips as the rules
allow (the shared SQL's take is seven round trips, its send twelve; a signal's wake waits on both).

A take is one statement: the run's row lock is the fence (held to its end), then the
signal at the wait's position, else the oldest pending one, taken, and for a wait its
journal entry written (the wait writes none then). A send is one call of the schema's
`signal_keep` (migration 25), which keeps the signal when the rulebook would; when it
would not (a refusal, or the signal of a key sent again), the send goes the slow way: it
locks the run, reads what the rulebook decides on, and raises or returns as it decides
(or, should the run have changed meanwhile, writes the signal, its event, the run's wake
and the notifications in one statement, in that transaction).

A wait that lingers in its slot for a signal is registered by its take (`runs.lingering`),
and `signal_keep` delivers into it, and tells the wait's process the journal entry in a
notification (DELIVERED): a wake then costs the send's one write, where a follower's
costs the emit's write and a read (and it cost the send's write, then the take's). An
entry too large for a notification is read by the woken wait (PEEK).
"""

from __future__ import annotations

import json
from typing import Any

from ...core._signals import Signal
from ...runs import TERMINAL_STATES
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import SignalSendParams, SignalTaken, SignalTakeParams
from ..sql import _signals as shared
from ..sql._columns import RUN_COLUMNS, run_from_row
from ._base import DELIVERED, PostgresBase

__all__ = ["PostgresSignals"]

# $1 run, $2 fence, $3 position, $4 name, $5 now; to journal the take, $6 the step's name,
# $7 its `step` event's data, $8 the events channel ($6 NULL: not journaled). A signal
# sent while this waited for the run's lock is not in its snapshot: then it finds none,
# and the send, which saw the run running, flagged it (wake_requested), so the park that
# follows comes due at once. One withdrawn meanwhile is seen pending by `pick`, but the
# UPDATE re-checks the row as it is now: a signal is taken or withdrawn, never both.
# `pick` is a scalar subquery of the UPDATE (one evaluation, then the primary key):
# joined, the planner ran it once for each pending signal of the run, and a take cost a
# millisecond per thousand waiting.
# The journal entry (a wait's; `entry` is core.taken_outcome's object, the float written
# shortest-exact as PostgreSQL 12+ does by default) is written as RECORD_STEPS writes one,
# fenced by `owner`'s lock, held to the commit: a wake costs one write, not a take and
# then a journal write. A position that holds an entry already is written over by no one:
# our own (a retry of a take whose reply was lost) is returned as journaled; another's is
# not, and the wait's own journal write is then refused as it would be (LeaseLost).
# A take withdraws the run's lingering wait (see migration 25), and with $9 (that wait,
# as runs.lingering holds it) registers it when it finds none, in the one UPDATE of the
# run's row (two of one row in one statement would leave one of them undone). Such a
# take commits without waiting for the disk (`unhurried`): it wrote the registration
# alone, and held the run's row until its commit, so a send that came meanwhile (the next
# message, right after the run's last event) waited out that flush too. Lost in a crash
# of the server, the registration delivers nothing (the wait then takes, as it would);
# any later commit that counts on it (a delivery into it) flushes it first, WAL being
# written in order. The wait's last take, which withdraws it, commits as any write.
TAKE = f"""
WITH owner AS (
    SELECT id FROM runs WHERE id = $1 AND fence = $2 AND state = 'running' FOR UPDATE
), kept AS (
    SELECT {shared.COLUMNS} FROM signals s
    WHERE s.run_id = $1 AND s.position = $3 AND EXISTS (SELECT 1 FROM owner)
), pick AS (
    SELECT seq FROM signals
    WHERE run_id = $1 AND name = $4 AND position IS NULL AND withdrawn_at IS NULL
      AND EXISTS (SELECT 1 FROM owner) AND NOT EXISTS (SELECT 1 FROM kept)
    ORDER BY seq LIMIT 1
), took AS (
    UPDATE signals s SET position = $3, taken_at = $5
    WHERE s.run_id = $1 AND s.seq = (SELECT seq FROM pick) AND s.position IS NULL AND s.withdrawn_at IS NULL
    RETURNING {shared.COLUMNS}
), found AS (
    SELECT * FROM kept UNION ALL SELECT * FROM took
), entry AS (
    SELECT json_build_object('payload', f.payload::json, 'seq', f.seq, 'sent_at', f.sent_at)::text AS result
    FROM found f WHERE $6::text IS NOT NULL
), earlier AS (
    SELECT name, status, result FROM steps
    WHERE run_id = $1 AND position = $3 AND EXISTS (SELECT 1 FROM entry)
), journaling AS (
    SELECT EXISTS (SELECT 1 FROM entry) AND NOT EXISTS (SELECT 1 FROM earlier) AS yes
), bumped AS (
    UPDATE runs SET last_seq = last_seq + CASE WHEN (SELECT yes FROM journaling) THEN 1 ELSE 0 END,
        lingering = CASE WHEN NOT EXISTS (SELECT 1 FROM found) THEN $9::jsonb END
    WHERE id = $1 AND EXISTS (SELECT 1 FROM owner)
      AND ((SELECT yes FROM journaling) OR lingering IS NOT NULL
           OR ($9::jsonb IS NOT NULL AND NOT EXISTS (SELECT 1 FROM found)))
    RETURNING last_seq, (SELECT yes FROM journaling) AS journaled
), stepped AS (
    INSERT INTO steps (run_id, position, name, status, result, error, fence, created_at)
    SELECT $1, $3, $6, 'done', e.result, NULL, $2, $5 FROM entry e CROSS JOIN bumped b WHERE b.journaled
), logged AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT $1, last_seq, 'step', $7, $5 FROM bumped WHERE journaled
), notified AS (
    SELECT pg_notify($8, $1::text) FROM bumped WHERE journaled
), unhurried AS (
    SELECT set_config('synchronous_commit', 'off', true)
    WHERE $9::jsonb IS NOT NULL AND NOT EXISTS (SELECT 1 FROM found)
)
SELECT EXISTS (SELECT 1 FROM owner), f.*,
       coalesce((SELECT result FROM earlier WHERE name = $6 AND status = 'done'),
                (SELECT e.result FROM entry e WHERE EXISTS (SELECT 1 FROM bumped WHERE journaled))),
       $9::jsonb IS NOT NULL AND EXISTS (SELECT 1 FROM owner) AND NOT EXISTS (SELECT 1 FROM found),
       (SELECT count(*) FROM notified) + (SELECT count(*) FROM unhurried)
FROM (SELECT 1) one LEFT JOIN found f ON true
"""
# A lingering wait woken ($1 run, $2 fence, $3 position, $4 name, $5 step), reading only:
# the signal a send delivered into it and journaled (see migration 25), else whether a
# signal of its name is pending (one that came the slow way), which a take then takes.
PEEK = f"""
SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND fence = $2 AND state = 'running'),
       EXISTS (SELECT 1 FROM signals WHERE run_id = $1 AND name = $4 AND position IS NULL
               AND withdrawn_at IS NULL),
       st.result, {shared.COLUMNS}
FROM (SELECT 1) one
LEFT JOIN steps st ON st.run_id = $1 AND st.position = $3 AND st.name = $5 AND st.status = 'done'
LEFT JOIN signals s ON s.run_id = $1 AND s.position = $3 AND st.result IS NOT NULL
"""
# What plan_signal decides on: the run, locked first (a statement of its own: under READ
# COMMITTED a statement's other reads keep the snapshot from before it waited for the lock,
# so a sender that waited behind another would number its signal as that one did), then
# its pending count, the number the next signal gets, and the signal of the key ($2).
LOCK = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 FOR UPDATE"
READ = """
SELECT (SELECT count(*) FROM signals WHERE run_id = $1 AND position IS NULL AND withdrawn_at IS NULL),
       (SELECT coalesce(max(seq), 0) + 1 FROM signals WHERE run_id = $1),
       (SELECT seq FROM signals WHERE run_id = $1 AND key = $2)
"""
# $1 run, $2 seq, $3 name, $4 payload, $5 now, $6 key, $7 sender, $8 the event's data,
# $9 the events channel, $10 the queued channel. The wake is shared.WAKE's; the queue is
# told only of a run that waits queued (one running, lingering in its slot for the signal,
# gives the workers nothing to claim, and a claim on every send slowed the take).
KEEP = f"""
WITH kept AS (
    INSERT INTO signals (run_id, seq, name, payload, sent_at, key, sent_by)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    RETURNING *
), bumped AS (
    UPDATE runs SET last_seq = last_seq + 1,
        run_at = CASE WHEN state = 'queued' AND waiting = 'signal' AND run_at > $5 THEN $5 ELSE run_at END,
        wake_requested = CASE WHEN state = 'running' THEN true ELSE wake_requested END
    WHERE id = $1
    RETURNING last_seq, queue, state
), logged AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT $1, last_seq, 'signalled', $8, $5 FROM bumped
), notified AS (
    SELECT pg_notify($9, $1::text), CASE WHEN state = 'queued' THEN pg_notify($10, queue) END FROM bumped
)
SELECT {shared.COLUMNS.replace("s.", "k.")}, (SELECT count(*) FROM notified) FROM kept k
"""


# The send's fast way: $1 run, $2 tenant, $3 name, $4 payload, $5 now, $6 key, $7 sender,
# $8 the pending cap, $9 the ended states, $10 the `signalled` event's data (its "signal"
# set by the function), $11 the events channel, $12 the queued channel, $13 the channel
# of deliveries. The function's name is qualified here (qualify() knows tables).
KEEP_FAST = (f"SELECT {shared.COLUMNS} FROM {{schema}}.signal_keep($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
             " $11, $12, $13) s")
ENDED = sorted(state.value for state in TERMINAL_STATES)
# The most waits of one process that may linger registered at once before it forgets them
# (a wait cancelled while it lingered leaves its key; forgotten, a wait reads its entry).
LINGERING_HERE_MAX = 10_000


class PostgresSignals(PostgresBase):
    """Signals' send and take (`SignalStore`; the rest is `..sql.signals`)."""

    async def signal_take(self, params: SignalTakeParams) -> SignalTaken:
        if params.peek and params.step is not None:
            return await self._peek(params)
        now = self.clock.now(params.now)
        logged = None if params.step is None else rules.step_event(params.position, params.step, "done", None)
        lingering = None if not (params.linger and logged) else json.dumps(
            {"fence": params.fence, "position": params.position, "name": params.name, "step": params.step,
             "logged": logged})
        (row,) = await self._fetch_raw(TAKE, params.run_id, params.fence, params.position, params.name, now,
                                       params.step, logged, self.channels["events"], lingering)
        here = (params.run_id, params.fence, params.position)
        if not row[0]:
            self._lingering_here.pop(here, None)
            return SignalTaken(False)
        *columns, journaled, registered, _ = row[1:]
        if journaled is not None:
            self.hub.fire(events_topic(params.run_id))
        if registered:
            if len(self._lingering_here) >= LINGERING_HERE_MAX:  # waits cancelled while they lingered
                self._lingering_here.clear()
            self._lingering_here.setdefault(here, None)
        else:
            self._lingering_here.pop(here, None)
        signal = None if columns[0] is None else Signal.of_row(*columns)
        return SignalTaken(True, signal, journaled, lingering=bool(registered))

    async def _peek(self, params: SignalTakeParams) -> SignalTaken:
        here = (params.run_id, params.fence, params.position)
        told = self._lingering_here.get(here)
        if told is not None:  # its notification brought the entry: nothing to read
            del self._lingering_here[here]
            outcome = json.loads(told)
            return SignalTaken(True, Signal(params.run_id, outcome["seq"], params.name, outcome["payload"],
                                            outcome["sent_at"], position=params.position), told)
        (row,) = await self._fetch_raw(PEEK, params.run_id, params.fence, params.position, params.name,
                                       params.step)
        owned, pending, journaled, *columns = row
        if not owned:
            self._lingering_here.pop(here, None)
            return SignalTaken(False)
        if journaled is not None and columns[0] is not None:
            self._lingering_here.pop(here, None)
            return SignalTaken(True, Signal.of_row(*columns), journaled)
        return SignalTaken(True, lingering=not pending)

    async def signal_send(self, params: SignalSendParams) -> Signal:
        now = self.clock.now(params.now)
        kept = await self._fetch_raw(
            KEEP_FAST.format(schema=f'"{self.schema}"'), params.run_id, params.tenant, params.name,
            params.payload, now, params.key, params.by, params.max_pending, ENDED,
            json.dumps(rules.signalled_event(params, 0)), self.channels["events"], self.channels["queued"],
            self.channels[DELIVERED])
        if not kept:
            return await self._send_judged(params, now)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(params.run_id))
        return Signal.of_row(*kept[0])

    async def _send_judged(self, params: SignalSendParams, now: float) -> Signal:
        """The slow way: the rulebook judges what this transaction reads after locking
        the run (it refuses, or returns the signal of the key, or keeps this one)."""
        async with self._conn() as conn, conn.transaction():
            signal, kept = await self._send_on(conn, params, now)
        if kept:
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(params.run_id))
        return signal

    async def _send(self, conn: Any, params: SignalSendParams, now: float) -> tuple[Signal, bool]:
        # The caller's transaction (`_caller_sql`'s connection): the same statements.
        return await self._send_on(conn.raw, params, now)

    async def _send_on(self, conn: Any, params: SignalSendParams, now: float) -> tuple[Signal, bool]:
        """The send in `conn`'s open transaction (asyncpg's, or the caller's psycopg one
        behind asyncpg's calls): the signal, and whether it was kept now."""
        found = await conn.fetchrow(self._sql(LOCK), params.run_id)
        run = None if found is None else run_from_row(list(found))
        pending, seq, key_seq = (0, 1, None) if found is None else list(
            await conn.fetchrow(self._sql(READ), params.run_id, params.key))
        same_key = None
        if key_seq is not None:
            row = await conn.fetchrow(self._sql(shared.BY_SEQ), params.run_id, key_seq)
            same_key = Signal.of_row(*row)
        if not rules.plan_signal(run, same_key, int(pending), params):
            assert same_key is not None
            return same_key, False
        kept = await conn.fetchrow(
            self._sql(KEEP), params.run_id, int(seq), params.name, params.payload, now, params.key,
            params.by, json.dumps(rules.signalled_event(params, int(seq))), self.channels["events"],
            self.channels["queued"])
        return Signal.of_row(*list(kept)[:-1]), True
