"""The SQL store's forks: a new run whose journal begins as a copy of another's first
entries, inserted and filled in one transaction (`RunStore.run_fork`)."""

from __future__ import annotations

from ...runs import Run
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import RunForkParams
from . import _statements as q
from ._base import SqlBase
from ._columns import run_from_row

__all__ = ["SqlForks"]

# The original's journal as the fork judges `from_step` on it: positions and names only.
JOURNAL_NAMES = "SELECT position, name FROM steps WHERE run_id = $1 ORDER BY position"
# Entries are copied as they were written (their fence and time too): a fork replays
# them as the original would have, a "started" one included (its outcome unknown).
COPY_STEPS = (
    "INSERT INTO steps (run_id, position, name, status, result, error, fence, created_at)"
    " SELECT $1, position, name, status, result, error, fence, created_at FROM steps"
    " WHERE run_id = $2 AND position < $3"
)
# Born at fence 1, as if claimed once: a worker reads no journal on a run's first claim
# (fence 1, engine._executor), and a fork's first claim must read the copy.
MARK_FORK = "UPDATE runs SET forked_from = $2, fence = 1 WHERE id = $1"


class SqlForks(SqlBase):
    """`run_fork`, over the dialect's insert."""

    async def run_fork(self, params: RunForkParams) -> Run:
        now = self.clock.now(params.insert.now)
        async with self._transaction() as conn:
            # Locked: a retry of the original (which drops failed entries) waits for the
            # copy, or the copy for it; never half of each.
            row = await conn.fetchrow(q.LOCK_RUN, params.run_id)
            original = rules.check_fork(None if row is None else run_from_row(row), params)
            journal = [(int(r[0]), str(r[1])) for r in await conn.fetch(JOURNAL_NAMES, original.id)]
            end = rules.fork_end(original.id, journal, params.from_step)
            (run,) = await self._insert_runs(conn, [params.insert], now)
            if run.existed:  # the key's run: this fork was made already (or the key is another's)
                return run
            await conn.execute(MARK_FORK, run.id, original.id)
            await conn.execute(COPY_STEPS, run.id, original.id, end)
            copied = sum(1 for position, _ in journal if position < end)
            await self._log(conn, run.id, "forked", rules.forked_event(original.id, end, copied), now)
            forked = await self._locked_run(conn, run.id)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(forked.id))
        return forked
