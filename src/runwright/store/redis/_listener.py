"""Redis pub/sub kept up: the store's hub and the fleet's bus each hold one.

A `Subscription` is one subscribed connection, taken again with a backoff whenever it
drops; while it is down its owner is told (`down`), so that it polls instead of
trusting silence, and told again once it is back (`up`): whatever was published
meanwhile was lost, as pub/sub does not replay. An idle connection is PINGed every
IDLE_PING_S, since a dead socket would otherwise look like a quiet one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Sequence

import redis.asyncio as aioredis

from ...core._waiting import bounded, halt
from .._hub import CANCEL, CHANNELS, QUEUED, RUN_CHANNELS, WORK_CHANNELS, Hub, done_topic, events_topic
from ._errors import FAILURES

__all__ = ["Listener", "Subscription"]

log = logging.getLogger("runwright.store.redis")
BACKOFF_MAX_S = 2.0
IDLE_PING_S = 2.0


class Subscription:
    """`channels` delivered to `deliver(channel, data)` until `stop()`; `up()` after
    each subscription taken, `down()` after each one ended (a stop included)."""

    def __init__(self, connect: Callable[[], aioredis.Redis], channels: Sequence[str],
                 deliver: Callable[[str, str], None], up: Callable[[], None],
                 down: Callable[[], None], what: str) -> None:
        self._connect = connect
        self._channels = list(channels)
        self._deliver = deliver
        self._up = up
        self._down = down
        self._what = what
        self._task: asyncio.Task[None] | None = None
        self.stopping = False

    async def start(self) -> None:
        """Return once the first subscription is in place (or has failed: `down`)."""
        ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._run(ready))
        await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        if self._task is not None:
            # redis-py may turn a cancelled read into a connection error, which the loop
            # would take for an outage: the flag says that this one is a stop.
            self.stopping = True
            await halt(self._task)
            self._task = None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        backoff_s = 0.05
        while not self.stopping:
            client = self._connect()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*self._channels)
                backoff_s = 0.05
                if not ready.done():
                    ready.set_result(None)
                self._up()
                await self._read(pubsub)
            except FAILURES as exc:  # any of them: subscribe again, never end deaf
                log.warning("%s: pub/sub connection lost (%s); subscribing again", self._what, exc)
            finally:
                self._down()
                if not ready.done():
                    ready.set_result(None)
                await _close_quietly(pubsub, client)
            await asyncio.sleep(backoff_s)
            backoff_s = min(BACKOFF_MAX_S, backoff_s * 2)

    async def _read(self, pubsub: aioredis.client.PubSub) -> None:
        quiet_since = time.monotonic()
        while not self.stopping:
            # With ignore_subscribe_messages, a PING's reply makes this return None at
            # once: only a quiet spell of IDLE_PING_S sends the next PING (a PING at
            # every None would be a PING per round trip, thousands a second).
            message = await pubsub.get_message(timeout=1.0)
            if message is None:
                if time.monotonic() - quiet_since > IDLE_PING_S:
                    quiet_since = time.monotonic()
                    await pubsub.ping()
                continue
            quiet_since = time.monotonic()
            if message.get("type") == "message":
                self._deliver(message["channel"], message["data"])


class Listener:
    """The store's subscriptions into its hub: due work and cancels, and with `runs` runs'
    ends and logs' growth on a subscription of their own (a worker takes none: every claim
    and finish publishes its runs' ids there, and each subscriber is sent them all). The
    hub is `degraded` while any of them is down (pollers poll fast then), and re-read by
    everyone whenever one comes or goes."""

    def __init__(self, connect: Callable[[], aioredis.Redis], hub: Hub, prefix: str) -> None:
        self._connect = connect
        self._hub = hub
        self._prefix = prefix
        self._names = {prefix + name: name for name in CHANNELS}
        self._subscriptions: dict[str, Subscription] = {}
        self._up_now: set[str] = set()
        self._adding = asyncio.Lock()  # a second caller returns once the first one's is in

    async def start(self, runs: bool = True) -> None:
        await self._add("store", WORK_CHANNELS)
        if runs:
            await self.follow_runs()

    async def follow_runs(self) -> None:
        """Deliver runs' ends and logs' growth too, from before this returns."""
        await self._add("store runs", RUN_CHANNELS)

    async def _add(self, what: str, names: Sequence[str]) -> None:
        async with self._adding:
            if what not in self._subscriptions:
                subscription = Subscription(self._connect, [self._prefix + name for name in names],
                                            self._fire, lambda: self._up(what), lambda: self._down(what),
                                            what)
                self._subscriptions[what] = subscription
                await subscription.start()

    async def stop(self) -> None:
        for subscription in self._subscriptions.values():
            await subscription.stop()

    def _up(self, what: str) -> None:
        self._up_now.add(what)
        self._hub.degraded = len(self._up_now) < len(self._subscriptions)
        self._hub.fire_all()  # anything missed while down: everyone re-reads

    def _down(self, what: str) -> None:
        self._up_now.discard(what)
        self._hub.degraded = True
        self._hub.fire_all()

    def _fire(self, channel: str, payload: str) -> None:
        name = self._names.get(channel, "")
        if name == "queued":
            self._hub.fire(QUEUED)
        elif name == "cancel":
            self._hub.fire(CANCEL)
        elif name in ("done", "events"):
            topic = done_topic if name == "done" else events_topic
            self._hub.fire_runs(topic, (int(i) for i in payload.split(",") if i))


async def _close_quietly(pubsub: aioredis.client.PubSub, client: aioredis.Redis) -> None:
    try:
        await bounded(pubsub.aclose(), 2)  # type: ignore[no-untyped-call, unused-ignore]  # typed in newer redis-py
    except Exception:
        pass
    try:
        await bounded(client.aclose(), 2)
    except Exception:
        pass
