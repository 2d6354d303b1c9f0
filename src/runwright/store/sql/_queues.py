"""The SQL store's paused queues."""

from __future__ import annotations

from .._params import QueuePauseParams
from . import _statements as q
from ._base import SqlBase

__all__ = ["SqlQueues"]


class SqlQueues(SqlBase):
    """Paused queues (`QueueStore`)."""

    # -- paused queues --------------------------------------------------------------------

    async def queue_set_paused(self, params: QueuePauseParams) -> bool:
        if params.paused:
            return await self._change(q.QUEUE_PAUSE, params.fleet, params.queue,
                                      self.clock.judged(params.now)) == 1
        return await self._change(q.QUEUE_RESUME, params.fleet, params.queue) == 1

    async def queue_list_paused(self, fleet: str) -> set[str]:
        return {str(row[0]) for row in await self._fetch(q.QUEUES_PAUSED, fleet)}
