"""The SQL store's signals. Every write locks the run's row first (SQLite: its write
transaction), so the sends, takes and ends of one run are ordered: a signal is numbered
after those sent before it, a pending count is exact, and a run that ends takes no more."""

from __future__ import annotations

from typing import Any

from ...core._signals import Signal
from ...errors import RunNotFound
from ...runs import Run
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import SignalListParams, SignalSendParams, SignalStartParams, SignalTaken, SignalTakeParams
from . import _statements as q
from ._base import SqlBase
from ._columns import run_from_row
from ._dialect import SqlConnection

__all__ = ["SqlSignals"]

COLUMNS = ("s.run_id, s.seq, s.name, s.payload, s.sent_at, s.key, s.sent_by, s.position, s.taken_at,"
           " s.withdrawn_at")
BY_KEY = f"SELECT {COLUMNS} FROM signals s WHERE s.run_id = $1 AND s.key = $2"
BY_SEQ = f"SELECT {COLUMNS} FROM signals s WHERE s.run_id = $1 AND s.seq = $2"
AT_POSITION = f"SELECT {COLUMNS} FROM signals s WHERE s.run_id = $1 AND s.position = $2"
OLDEST_PENDING = (f"SELECT {COLUMNS} FROM signals s WHERE s.run_id = $1 AND s.name = $2"
                  f" AND s.position IS NULL AND s.withdrawn_at IS NULL ORDER BY s.seq LIMIT 1")
PENDING_COUNT = "SELECT count(*) FROM signals WHERE run_id = $1 AND position IS NULL AND withdrawn_at IS NULL"
NEXT_SEQ = "SELECT coalesce(max(seq), 0) + 1 FROM signals WHERE run_id = $1"
INSERT = """
INSERT INTO signals (run_id, seq, name, payload, sent_at, key, sent_by)
VALUES ($1, CAST($2 AS integer), $3, $4, CAST($5 AS double precision), $6, $7)
"""
TAKE = """
UPDATE signals SET position = CAST($3 AS integer), taken_at = CAST($4 AS double precision)
WHERE run_id = $1 AND seq = $2 AND position IS NULL
"""
WITHDRAW = """
UPDATE signals SET withdrawn_at = CAST($3 AS double precision)
WHERE run_id = $1 AND seq = $2 AND position IS NULL AND withdrawn_at IS NULL
"""
# A run parked on a signal wait comes due now; one still running is flagged so that a park
# on its way comes due at once (rules: a park woken meanwhile). A run parked on anything
# else (a timer, its children) is left alone: its wait does not read signals.
WAKE = """
UPDATE runs SET
    run_at = CASE WHEN state = 'queued' AND waiting = 'signal' AND run_at > $2 THEN $2 ELSE run_at END,
    wake_requested = CASE WHEN state = 'running' THEN true ELSE wake_requested END
WHERE id = $1
"""


class SqlSignals(SqlBase):
    """Signals (`SignalStore`)."""

    async def signal_send(self, params: SignalSendParams) -> Signal:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            signal, kept = await self._send(conn, params, now)
        if kept:
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(params.run_id))
        return signal

    async def signal_send_in(self, connection: Any, params: SignalSendParams) -> Signal:
        """In the caller's open transaction: the signal is kept, and its run woken, if and
        only if that transaction commits (other processes learn of it at the commit)."""
        signal, _ = await self._send(await self._caller_sql(connection), params, self.clock.now(params.now))
        return signal

    async def _send(self, conn: SqlConnection, params: SignalSendParams, now: float) -> tuple[Signal, bool]:
        """The send inside `conn`'s transaction: the signal, and whether it was kept now
        (False: its key named it already)."""
        found = await conn.fetchrow(q.LOCK_RUN, params.run_id)
        run = None if found is None else run_from_row(found)
        same_key = None
        if params.key is not None and run is not None:
            row = await conn.fetchrow(BY_KEY, params.run_id, params.key)
            same_key = None if row is None else Signal.of_row(*row)
        pending = 0 if run is None else int(await conn.fetchval(PENDING_COUNT, params.run_id))
        if not rules.plan_signal(run, same_key, pending, params):
            assert same_key is not None
            return same_key, False
        signal = await self._keep(conn, params.run_id, params, now)
        await conn.execute(WAKE, params.run_id, now)
        await conn.notify("queued")
        return signal, True

    async def signal_start(self, params: SignalStartParams) -> tuple[Run, Signal | None]:
        now = self.clock.now(params.start.now)
        async with self._transaction() as conn:
            (run,) = await self._insert_runs(conn, [params.start], now)
            if run.existed:
                return run, None
            signal = await self._keep(conn, run.id, params.signal, now)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(run.id))
        return run, signal

    async def _keep(self, conn: SqlConnection, run_id: int, params: SignalSendParams, now: float) -> Signal:
        seq = int(await conn.fetchval(NEXT_SEQ, run_id))
        await conn.execute(INSERT, run_id, seq, params.name, params.payload, now, params.key, params.by)
        await self._log(conn, run_id, "signalled", rules.signalled_event(params, seq), now)
        row = await conn.fetchrow(BY_SEQ, run_id, seq)
        assert row is not None
        return Signal.of_row(*row)

    async def signal_take(self, params: SignalTakeParams) -> SignalTaken:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return SignalTaken(False)
            row = await conn.fetchrow(AT_POSITION, params.run_id, params.position)
            if row is None:
                row = await conn.fetchrow(OLDEST_PENDING, params.run_id, params.name)
                if row is None:
                    return SignalTaken(True)
                await conn.execute(TAKE, params.run_id, row[1], params.position, now)
                row = await conn.fetchrow(BY_SEQ, params.run_id, row[1])
        assert row is not None
        return SignalTaken(True, Signal.of_row(*row))

    async def signal_list(self, params: SignalListParams) -> list[Signal]:
        async with self._reading() as conn:
            found = await conn.fetchrow(q.GET_RUN, params.run_id)
            if found is None or (params.tenant is not None and run_from_row(found).tenant != params.tenant):
                raise RunNotFound(f"run {params.run_id} not found")
            clauses, args = ["s.run_id = $1", "s.seq > $2"], list[Any]([params.run_id, params.after])
            if params.pending:
                clauses.append("s.position IS NULL AND s.withdrawn_at IS NULL")
            args.append(params.limit)
            rows = await conn.fetch(f"SELECT {COLUMNS} FROM signals s WHERE {' AND '.join(clauses)}"
                                    f" ORDER BY s.seq LIMIT ${len(args)}", *args)
        return [Signal.of_row(*row) for row in rows]

    async def signal_withdraw(self, run_id: int, seq: int) -> bool:
        now = self.clock.now(None)
        async with self._transaction() as conn:
            if await conn.fetchrow(q.LOCK_RUN, run_id) is None:
                return False
            gone = await conn.execute(WITHDRAW, run_id, seq, now)
            if gone:
                await self._log(conn, run_id, "withdrawn", {"signal": seq}, now)
        if gone:
            self.hub.fire(events_topic(run_id))
        return bool(gone)
