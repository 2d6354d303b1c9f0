"""The SQL store's limits: rate limits (token buckets) and concurrency limits' overrides."""

from __future__ import annotations

from .. import _limit_rules as limit_rules
from .. import _rate_rules as rate_rules
from .. import _rules as rules
from .._hub import QUEUED
from .._params import BucketTakeParams, LimitSetParams, LimitUse
from . import _statements as q
from ._base import SqlBase

__all__ = ["SqlLimits"]


class SqlLimits(SqlBase):
    """Rate limits (`LimitStore`)."""

    # -- rate limits --------------------------------------------------------------------

    async def bucket_take(self, params: BucketTakeParams) -> float:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            await conn.execute(q.BUCKET_ENSURE, params.name, params.capacity, now)
            row = await conn.fetchrow(q.BUCKET_LOCK, params.name)
            assert row is not None, "the bucket was just made"
            take = rules.take_from_bucket(params, float(row[0]), float(row[1]), now)
            if take.granted:
                await conn.execute(q.BUCKET_SET, params.name, take.tokens, take.at)
        return take.wait_s

    # -- concurrency limits per key ---------------------------------------------------

    async def limit_set(self, params: LimitSetParams) -> None:
        async with self._transaction() as conn:
            if params.max is None:
                await conn.execute(q.LIMIT_UNSET, params.target)
            else:
                await conn.execute(q.LIMIT_SET, params.target, params.max)
            # A max raised lets held runs go: claimers look again now, not at their poll.
            await conn.notify("queued")
        self.hub.fire(QUEUED)

    async def limit_list(self) -> list[LimitUse]:
        now = self.clock.now()
        async with self._reading() as conn:
            running = [row[0] for row in await conn.fetch(q.LIMITED_RUNNING)]
            queued = [row[0] for row in await conn.fetch(q.LIMITED_QUEUED)]
            overrides = {row[0]: int(row[1]) for row in await conn.fetch(q.LIMIT_OVERRIDES)}
            logs: dict[str, list[tuple[float, float]]] = {}
            if rate_rules.Book(now, overrides).missing([*running, *queued]):  # any rate at all
                for row in await conn.fetch(q.RATE_SPENT_LIVE, now):
                    logs.setdefault(row[0], []).append((float(row[1]), float(row[2])))
        return rate_rules.merged(limit_rules.uses(running, queued, overrides),
                                 rate_rules.uses(running, queued, overrides, logs, now))

    async def limit_overrides(self) -> dict[str, int]:
        async with self._reading() as conn:
            return {row[0]: int(row[1]) for row in await conn.fetch(q.LIMIT_OVERRIDES)}
