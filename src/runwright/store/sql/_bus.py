"""What the PostgreSQL and SQLite buses share: the statements on `fleet_slots`
(migration 0012 of each), written once with `$n` placeholders and a `NOW` marker for the
store's clock in epoch seconds, rewritten per dialect. (The paused queues of that
migration are the store's: its claims read them.)

A slot's row is kept forever, so that its generation keeps growing across lives; a
`state` of NULL means no process holds it. "Free" is decided here in one place: no
state, or past `expires_at` (see `bus.Census.live`, the same rule read in Python).
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

from .._bus import Census, Life, Presence, State, Writing
from ._dialect import Dialect

__all__ = ["SqlBus"]

# The upsert takes the slot only when no live row holds it: a concurrent claimer of the
# same ordinal waits on the row, then finds it live and changes nothing (no RETURNING
# row), so exactly one of them gets the new generation.
CLAIM = """
INSERT INTO fleet_slots (root, kind, ordinal, generation, state, host, pid, drain_s,
                         claimed_at, heartbeat_at, expires_at)
VALUES ($1, $2, $3, 1, $4, $5, $6, $7, NOW, NOW, NOW + $8)
ON CONFLICT (root, kind, ordinal) DO UPDATE SET
    generation = fleet_slots.generation + 1, state = excluded.state, host = excluded.host,
    pid = excluded.pid, drain_s = excluded.drain_s, claimed_at = excluded.claimed_at,
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at
WHERE fleet_slots.state IS NULL OR fleet_slots.expires_at <= NOW
RETURNING generation
"""
# Only the life itself, and only while it lasts: a row past its TTL is a life that ended,
# and refreshing it would resurrect it under a slot another process may now hold.
REFRESH = """
UPDATE fleet_slots SET state = $5, drain_s = $6, heartbeat_at = NOW, expires_at = NOW + $7
WHERE root = $1 AND kind = $2 AND ordinal = $3 AND generation = $4
  AND state IS NOT NULL AND expires_at > NOW
"""
DELETE = """
UPDATE fleet_slots SET state = NULL, expires_at = NULL
WHERE root = $1 AND kind = $2 AND ordinal = $3 AND generation = $4
"""
CENSUS = """
SELECT kind, ordinal, generation, state, host, pid, drain_s, claimed_at, heartbeat_at,
       expires_at, NOW
FROM fleet_slots WHERE root = $1 AND state IS NOT NULL
"""
NOW_ONLY = "SELECT NOW"


class SqlBus(abc.ABC):
    """Presence in SQL; each dialect brings its connection and its
    messages (NOTIFY, or a polled table)."""

    dialect: Dialect
    now_sql: str  # the store's clock, in epoch seconds

    def __init__(self, root: str) -> None:
        self.root = root

    def _sql(self, statement: str) -> str:
        return self.dialect.prepare(statement.replace("NOW", self.now_sql))

    @abc.abstractmethod
    async def _fetch(self, statement: str, *args: Any) -> list[Sequence[Any]]: ...

    @abc.abstractmethod
    async def _execute(self, statement: str, *args: Any) -> int: ...

    async def census(self) -> Census:
        rows = await self._fetch(CENSUS, self.root)
        if not rows:
            now = (await self._fetch(NOW_ONLY))[0][0]
            return Census([], float(now))
        return Census([_presence(row) for row in rows], float(rows[0][10]))

    async def slot_claim(self, kind: str, ordinal: int, writing: Writing) -> int | None:
        rows = await self._fetch(CLAIM, self.root, kind, ordinal, writing.state.value, writing.host,
                                 writing.pid, writing.drain_s, writing.ttl_s)
        return int(rows[0][0]) if rows else None

    async def presence_refresh(self, life: Life, writing: Writing) -> bool:
        changed = await self._execute(REFRESH, self.root, life.kind, life.ordinal, life.generation,
                                      writing.state.value, writing.drain_s, writing.ttl_s)
        return changed > 0

    async def presence_delete(self, life: Life) -> None:
        await self._execute(DELETE, self.root, life.kind, life.ordinal, life.generation)


def _presence(row: Sequence[Any]) -> Presence:
    return Presence(kind=str(row[0]), ordinal=int(row[1]), generation=int(row[2]),
                    state=State(row[3]), host=str(row[4]), pid=int(row[5]), drain_s=float(row[6]),
                    claimed_at=float(row[7]), heartbeat_at=float(row[8]), expires_at=float(row[9]))
