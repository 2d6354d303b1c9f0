"""The Redis store's limits: rate limits (token buckets) and concurrency limits' overrides."""

from __future__ import annotations

import functools
import json

from .. import _limit_rules as limit_rules
from .. import _rate_rules as rate_rules
from .. import _rules as rules
from .._params import BucketTakeParams, LimitSetParams, LimitUse
from ._base import STALE, RedisBase, Stale, _float_or_none, due_key

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

    # -- concurrency limits per key ---------------------------------------------------

    async def limit_set(self, params: LimitSetParams) -> None:
        key = self.key("limit_overrides")
        if params.max is None:
            await self._call(self.redis.hdel, key, params.target)
        else:
            await self._call(self.redis.hset, key, params.target, params.max)
        # A max raised lets held runs go: claimers look again now, not at their poll.
        await self._call(self.redis.publish, self.key("queued"), "")

    async def limit_overrides(self) -> dict[str, int]:
        flat = await self._call(self.redis.hgetall, self.key("limit_overrides"))
        return {target: int(cap) for target, cap in flat.items()}

    async def limit_list(self) -> list[LimitUse]:
        running = await self._call(self.redis.hvals, self.key("lheld"))
        # The queued runs' limits, read through the due sets of the queues with queued runs
        # (an operator's view, not the claim's path).
        queues = {json.loads(field)[1] for field, n in
                  (await self._call(self.redis.hgetall, self.key("counts"))).items()
                  if json.loads(field)[2] == "queued" and int(n) > 0}
        ids: list[str] = []
        for queue in sorted(queues):
            for member in await self._call(self.redis.smembers, self.key(f"dues:{queue}")):
                head, task = member.split(":", 1)
                ids += await self._call(self.redis.zrange, self.key(due_key(head, queue, task)), 0, -1)
        queued = []
        if ids:
            pipe = self.redis.pipeline(transaction=False)
            for member in ids:
                pipe.hget(self.key(f"run:{int(member)}"), "limits")
            queued = await self._call(pipe.execute)
        overrides = await self.limit_overrides()
        # Rates: the spends in their window of each key a run running or queued names.
        now = await self._now(None)
        slots = sorted(set(rate_rules.Book(now, overrides).missing([*running, *queued])))
        logs: dict[str, list[tuple[float, float]]] = {}
        for s in slots:
            entries = await self._call(functools.partial(self.redis.zrangebyscore, withscores=True),
                                       self.key(f"rate:{s}"), f"({now!r}", "+inf")
            logs[s] = [(float(until), float(member.rsplit(":", 1)[1])) for member, until in entries]
        return rate_rules.merged(limit_rules.uses(running, queued, overrides),
                                 rate_rules.uses(running, queued, overrides, logs, now))
