"""The Redis store's rate limits: token buckets."""

from __future__ import annotations

from .. import _rules as rules
from .._params import BucketTakeParams
from ._base import STALE, RedisBase, Stale, _float_or_none

__all__ = ["RedisLimits"]


class RedisLimits(RedisBase):
    """Rate limits (`LimitStore`)."""

    # -- rate limits --------------------------------------------------------------------

    async def bucket_take(self, params: BucketTakeParams) -> float:
        key = self.key(f"bucket:{params.name}")

        async def attempt() -> float | Stale:
            now = await self._now(params.now)
            tokens, updated_at = await self._call(self.redis.hmget, key, "tokens", "updated_at")
            take = rules.take_from_bucket(params, _float_or_none(tokens), _float_or_none(updated_at), now)
            if take.granted and not await self._script("bucket_take", params.name, tokens, updated_at,
                                                       take.tokens, take.at):
                return STALE
            return take.wait_s

        return await self._decided(attempt, f"rate bucket {params.name!r}")
