"""The SQL store's workers."""

from __future__ import annotations

import asyncio

from .._params import WorkerHeartbeatParams, WorkerInfo, WorkerRegisterParams, WorkerWatchParams
from . import _statements as q
from ._base import SqlBase
from ._columns import worker_from_row, worker_row

__all__ = ["SqlWorkers"]


class SqlWorkers(SqlBase):
    """Workers (`WorkerStore`)."""

    # -- workers ------------------------------------------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            return int(await conn.fetchval(q.WORKER_INSERT, *worker_row(params, now)))

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        return await self._change(q.WORKER_HEARTBEAT, params.worker_id,
                                  self.clock.now(params.now)) == 1

    async def worker_deregister(self, worker_id: int) -> None:
        await self._change(q.WORKER_DELETE, worker_id)

    async def worker_list(self) -> list[WorkerInfo]:
        return [worker_from_row(row) for row in await self._fetch(q.WORKER_LIST)]

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """Nothing wakes a rescuer here (PostgreSQL's store does): it sleeps."""
        await asyncio.sleep(params.timeout_s)
        return False
