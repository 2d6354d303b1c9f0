"""Redis pub/sub into the store's hub.

One subscribed connection per store. While it is down the hub is `degraded`, so pollers
poll fast instead of trusting silence; when it comes back everyone re-reads once
(whatever was published meanwhile was lost, as pub/sub does not replay).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import redis.asyncio as aioredis

from ...waiting import bounded
from ..hub import CANCEL, QUEUED, Hub, done_topic, events_topic
from .errors import FAILURES
from .tasks import halt

__all__ = ["Listener"]

log = logging.getLogger("runwright.store.redis")
BACKOFF_MAX_S = 2.0
IDLE_PING_S = 2.0


class Listener:
    def __init__(self, connect: Callable[[], aioredis.Redis], hub: Hub, prefix: str) -> None:
        self._connect = connect
        self._hub = hub
        self._channels = {prefix + name: name for name in ("queued", "done", "cancel", "events")}
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        """Return once the first subscription is in place (or has failed: degraded)."""
        ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._run(ready))
        await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        if self._task is not None:
            # redis-py may turn a cancelled read into a connection error, which the loop
            # would take for an outage: the flag says that this one is a stop.
            self._stopping = True
            await halt(self._task)
            self._task = None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        backoff_s = 0.05
        while not self._stopping:
            client = self._connect()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*self._channels)
                self._hub.degraded = False
                backoff_s = 0.05
                if not ready.done():
                    ready.set_result(None)
                self._hub.fire_all()  # anything missed while down: everyone re-reads
                await self._deliver(pubsub)
            except FAILURES as exc:  # any of them: reconnect, never end deaf
                log.warning("pub/sub connection lost (%s); polling until it is back", exc)
            finally:
                self._hub.degraded = True
                self._hub.fire_all()
                if not ready.done():
                    ready.set_result(None)
                await _close_quietly(pubsub, client)
            await asyncio.sleep(backoff_s)
            backoff_s = min(BACKOFF_MAX_S, backoff_s * 2)

    async def _deliver(self, pubsub: aioredis.client.PubSub) -> None:
        quiet_since = time.monotonic()
        while not self._stopping:
            message = await pubsub.get_message(timeout=1.0)
            if message is None:
                if time.monotonic() - quiet_since > IDLE_PING_S:
                    # Idle: a PING proves the connection is still there (a dead socket
                    # would otherwise look like a quiet one).
                    quiet_since = time.monotonic()
                    await pubsub.ping()
                continue
            quiet_since = time.monotonic()
            if message.get("type") == "message":
                self._fire(self._channels.get(message["channel"], ""), message["data"])

    def _fire(self, name: str, payload: str) -> None:
        if name == "queued":
            self._hub.fire(QUEUED)
        elif name == "cancel":
            self._hub.fire(CANCEL)
        elif name in ("done", "events"):
            topic = done_topic if name == "done" else events_topic
            self._hub.fire_runs(topic, (int(i) for i in payload.split(",") if i))


async def _close_quietly(pubsub: aioredis.client.PubSub, client: aioredis.Redis) -> None:
    try:
        await bounded(pubsub.aclose(), 2)  # type: ignore[no-untyped-call]
    except Exception:
        pass
    try:
        await bounded(client.aclose(), 2)
    except Exception:
        pass
