"""The SQL store's rate limits: token buckets."""

from __future__ import annotations

from .. import _rules as rules
from .._params import BucketTakeParams
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
