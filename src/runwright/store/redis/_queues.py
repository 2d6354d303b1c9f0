"""The Redis store's paused queues."""

from __future__ import annotations

from .._params import QueuePauseParams
from ._base import RedisBase

__all__ = ["RedisQueues"]


class RedisQueues(RedisBase):
    """Paused queues (`QueueStore`)."""

    # -- paused queues: one set per fleet root ------------------------------------------

    def _paused_key(self, fleet: str) -> str:
        # Under the fleet's keys (`fleet:<root>:`), read by the claim and next_due scripts.
        return self.key(f"fleet:{fleet}:paused")

    async def queue_set_paused(self, params: QueuePauseParams) -> bool:
        change = self.redis.sadd if params.paused else self.redis.srem
        return bool(await self._call(change, self._paused_key(params.fleet), params.queue))

    async def queue_list_paused(self, fleet: str) -> set[str]:
        return {str(queue) for queue in await self._call(self.redis.smembers, self._paused_key(fleet))}
