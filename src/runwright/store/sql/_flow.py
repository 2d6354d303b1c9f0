"""The SQL store's flow control per key at submission (singleton, throttle, debounce, batch).

A batch that holds a run with flow control is inserted in one transaction: the rows of its
keys in `flow_keys` are made if missing and locked (FOR UPDATE; SQLite's write lock holds
them all anyway) in key order, so two batches never wait on each other crosswise; then each
run is decided by store._flow_rules on the key's standing run, read under that lock, and
written. Runs without flow control keep each dialect's own insert, which reads nothing of
this.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Sequence

from ...errors import StoreError
from ...runs import Run, RunState
from .. import _flow_rules as flow_rules
from .. import _rules as rules
from .._params import RunInsertParams
from . import _statements as q
from ._base import SqlBase
from ._columns import run_from_row
from ._dialect import SqlConnection
from ._runs import CONFLICT_RETRIES

__all__ = ["SqlFlow"]


class SqlFlow(SqlBase):
    """`run_insert_many` of a batch with flow control."""

    async def _insert_flowed(self, params: Sequence[RunInsertParams]) -> list[Run]:
        for attempt in range(CONFLICT_RETRIES):
            try:
                return await self._insert_flowed_once(params)
            except StoreError as exc:
                # A deadlock with a cancel of the replaced run's family, say: rolled back
                # whole, and decided again on what the store holds then.
                if not self._rolled_back(exc) or attempt == CONFLICT_RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _insert_flowed_once(self, params: Sequence[RunInsertParams]) -> list[Run]:
        now = self.clock.now(params[0].now)
        flows = [None if p.flow is None else flow_rules.parsed(p.flow) for p in params]
        async with self._transaction() as conn:
            for slot in sorted({flow.slot for flow in flows if flow is not None}):
                await self._lock_key(conn, slot)
            out: list[Run] = []
            for p, flow in zip(params, flows):
                if flow is None:
                    out += await self._insert_runs(conn, [p], now)
                else:
                    out.append(await self._insert_flow(conn, p, flow, now))
        self.hub.fire_all()  # queued, and the done topic of a replaced run
        return out

    async def _lock_key(self, conn: SqlConnection, slot: str) -> None:
        """Make the key's row if missing and lock it. Retention may remove the row between
        the two (flow_key_reclaim, which takes it locked): the lock then finds nothing, and
        the row is made again, else this submission would decide and write unlocked, and
        its pointer would be lost."""
        while True:
            await conn.execute(q.FLOW_ENSURE, slot)
            if await conn.fetchrow(q.FLOW_LOCK, slot) is not None:
                return

    async def _insert_flow(self, conn: SqlConnection, p: RunInsertParams, flow: flow_rules.Flow,
                           now: float) -> Run:
        if not p.key_is_fresh:  # a key named again gets its run, as any insert
            existing = await conn.fetchrow(self.get_by_key, p.tenant or "", p.key)
            if existing is not None:
                run = run_from_row(existing)
                run.existed = True
                return run
        pointer = await conn.fetchrow(q.FLOW_LOCK, flow.slot)
        standing = None
        if pointer is not None and pointer[0] is not None:
            found = await conn.fetchrow(q.LOCK_RUN, int(pointer[0]))
            if found is not None:
                standing = flow_rules.Standing(run_from_row(found), float(pointer[1]))
        wanted = now if p.run_at is None else p.run_at
        plan = flow_rules.plan(flow, standing, wanted, now, p.task, flow_rules.items_of(p, standing))
        if plan.action == "drop":
            assert standing is not None
            run = standing.run
        elif plan.action == "update":
            assert standing is not None
            args = p.args if p.merge is None else p.merge(standing.run.args, p.args)
            await conn.execute(q.FLOW_DEBOUNCE, standing.run.id, args, plan.run_at)
            await self._log(conn, standing.run.id, plan.outcome, {"run_at": plan.run_at}, now)
            await conn.execute(q.FLOW_SET, flow.slot, standing.run.id, plan.run_at)
            run = await self._locked_run(conn, standing.run.id)
            await conn.notify("queued")
        else:
            (run,) = await self._insert_runs(conn, [dataclasses.replace(p, run_at=plan.run_at)], now)
            if run.existed:  # its key named a run after all (a retry that committed)
                return run
            if plan.waiting is not None:
                await conn.execute(q.RUN_SET_WAITING, run.id, plan.waiting)
                run.waiting = plan.waiting
            if plan.cancel is not None:
                await self._cancel_replaced(conn, plan.cancel, run.id, now)
                run.replaced = plan.cancel
            await conn.execute(q.FLOW_SET, flow.slot, run.id, plan.run_at)
        run.outcome = plan.outcome
        return run

    async def _cancel_replaced(self, conn: SqlConnection, run_id: int, by: int, now: float) -> None:
        """The queued run a singleton replaces ends cancelled, its reason naming the new run."""
        reason = flow_rules.replaced_reason(by)
        await self._end_queued(conn, run_id, RunState.CANCELLED, now, "cancelled",
                               {"reason": reason}, error=rules.cancelled_error(reason))
        replaced = await self._locked_run(conn, run_id)
        await self._wake_parents(conn, [replaced], now)

