"""The Redis store's workers: registrations, and a liveness key with a TTL."""

from __future__ import annotations

import asyncio
import json
import logging

from ...errors import StoreError
from .._params import WorkerHeartbeatParams, WorkerInfo, WorkerRegisterParams, WorkerWatchParams
from ._base import RedisBase

__all__ = ["REFRESHES_PER_TTL", "RedisWorkers"]

log = logging.getLogger("runwright.store.redis")
# A liveness key is set again this many times per TTL: a loaded event loop has slack
# before its worker is taken for dead.
REFRESHES_PER_TTL = 4


class RedisWorkers(RedisBase):
    """Workers (`WorkerStore`)."""

    # -- workers: a liveness key with a TTL ---------------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        now = await self._now(params.now)
        registration = json.dumps({"host": params.host, "pid": params.pid,
                                   "queues": list(params.queues), "tasks": list(params.tasks),
                                   "started_at": now, "version": params.version,
                                   "majors": None if params.majors is None else {
                                       task: list(majors) for task, majors in params.majors.items()}})
        worker_id = int(await self._script("worker_register", registration, now, self._ttl_ms()))
        self._alive_ids.add(worker_id)
        if self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_liveness())
        return worker_id

    def _ttl_ms(self) -> int:
        return max(1, int(self.liveness_s * 1000))

    async def _refresh_liveness(self) -> None:
        """Keep the liveness keys of this process's workers: they lapse when the process
        dies or stalls, which is how others learn that its runs need a new owner."""
        while not self._closing:
            await asyncio.sleep(self.liveness_s / REFRESHES_PER_TTL)
            for worker_id in list(self._alive_ids):
                try:
                    if not await self._script("worker_heartbeat", worker_id, "keep", self._ttl_ms()):
                        self._alive_ids.discard(worker_id)  # declared dead: it registers again
                except StoreError as exc:
                    log.warning("liveness refresh failed (%s); retrying", exc)

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        await self._now(None)  # keeps the clock's offset fresh (see runwright.core._clock)
        alive = bool(await self._script("worker_heartbeat", params.worker_id,
                                        self._now_arg(params.now), self._ttl_ms()))
        if not alive:
            self._alive_ids.discard(params.worker_id)
        return alive

    async def worker_deregister(self, worker_id: int) -> None:
        self._alive_ids.discard(worker_id)
        await self._script("worker_deregister", worker_id)

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """A worker's key lapses by its TTL: nothing wakes a rescuer at a death, it sleeps."""
        await asyncio.sleep(params.timeout_s)
        return False

    async def worker_list(self) -> list[WorkerInfo]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.key("workers"))
        pipe.hgetall(self.key("beats"))
        registrations, beats = await self._call(pipe.execute)
        out = []
        for worker_id in sorted(registrations, key=int):
            info = json.loads(registrations[worker_id])
            out.append(WorkerInfo(int(worker_id), info["host"], info["pid"], info["queues"],
                                  info["tasks"], info["started_at"], float(beats.get(worker_id, 0)),
                                  info.get("version", "0.0.0"), info.get("majors")))
        return out
