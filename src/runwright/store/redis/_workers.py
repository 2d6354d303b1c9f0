"""The Redis store's workers: registrations, and a liveness key with a TTL (kept by a
thread: see _keeper.py)."""

from __future__ import annotations

import asyncio
import json

from .._params import WorkerHeartbeatParams, WorkerInfo, WorkerRegisterParams, WorkerWatchParams
from ._base import RedisBase
from ._keeper import LivenessKeeper

__all__ = ["RedisWorkers"]


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
        if self._keeper is None:
            assert self._scripts is not None, "store is not open"
            self._keeper = LivenessKeeper(self._client_url, self.session_name, self.key("ids"),
                                          self._scripts.source("worker_heartbeat"), self.liveness_s)
        self._keeper.add(worker_id)
        return worker_id

    def _ttl_ms(self) -> int:
        return max(1, int(self.liveness_s * 1000))

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        await self._now(None)  # keeps the clock's offset fresh (see runwright.core._clock)
        alive = bool(await self._script("worker_heartbeat", params.worker_id,
                                        self._now_arg(params.now), self._ttl_ms()))
        if not alive and self._keeper is not None:
            self._keeper.discard(params.worker_id)
        return alive

    async def worker_deregister(self, worker_id: int) -> None:
        if self._keeper is not None:
            self._keeper.discard(worker_id)
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
