"""Fleet: the App's face of the fleet bus (`app.fleet`).

It owns the bus (`store.bus(root)`, opened on first use), routes what comes off
the bus (replies to the broadcast waiting for them, ops to this process's member), and
holds the handlers: the user's (`@app.on_fleet("reload-config")`) and the built-in
`ping`, `evict-cache`, `pause-queue`, `resume-queue` and `recycle`. A part of runwright
with ops of its own registers them as a user does (`on`, with `reserve=True`).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Awaitable, Callable, Sequence

from ..core import _inputs as inputs
from ..core._waiting import wait_set
from ..errors import InvalidInput, StoreError
from ..store._bus import Bus, encode
from ..store._interface import Store
from ..store._params import QueuePauseParams
from ._boot import StartingShape, check_apply_window, check_one_host, check_unchanged
from ._broadcast import ReportRow, Tally
from ._cache import Cache
from ._member import Handler, Member
from ._presence import Census, describe, parse_name
from ._recycle import RecycleReport, roll
from ._settings import FleetSettings

__all__ = ["BUILTIN_OPS", "Fleet"]

BUILTIN_OPS = ("evict-cache", "pause-queue", "ping", "recycle", "resume-queue")
Resync = Callable[[], Awaitable[None]]


class Fleet:
    """The fleet of one App's root (`settings.root`) on its store."""

    def __init__(self, store: Store, settings: FleetSettings, connect: Callable[[], Awaitable[object]],
                 url_from_env: bool) -> None:
        self.store = store
        self.settings = settings
        self.cache = Cache()
        self.member: Member | None = None
        self._connect = connect
        self._started = StartingShape.now(url_from_env)
        self._handlers: dict[str, Handler] = {
            "ping": lambda _payload: {"pong": True},
            "evict-cache": self._evict_cache,
            "pause-queue": self._queue_changed,
            "resume-queue": self._queue_changed,
            "recycle": lambda _payload: {"drain_s": self.member.drain_s if self.member else 0},
        }
        self._reserved = set(BUILTIN_OPS)  # the ops `on` refuses to (re)declare
        self._resyncs: list[Resync] = []
        self._bus: Bus | None = None
        self._opening = asyncio.Lock()
        self._waiting: dict[str, tuple[Tally, asyncio.Event]] = {}

    @property
    def root(self) -> str:
        return self.settings.root

    # -- declaring ------------------------------------------------------------------

    def on(self, op: str, *, reserve: bool = False) -> Callable[[Handler], Handler]:
        """`@app.on_fleet("reload-config")`: `fn(payload) -> detail` (sync or async) runs in
        every ready process that receives the op; raising reports `failed` with its error.
        `reserve=True`: once registered, `op` is refused to any later declaration, as a
        built-in op is (a part of runwright with ops of its own keeps them so)."""
        if not isinstance(op, str) or not op or op in self._reserved:
            raise InvalidInput(f"a fleet op is a non-empty name other than the built-in "
                               f"{', '.join(sorted(self._reserved))}; got {op!r}")

        def register(fn: Handler) -> Handler:
            if op in self._reserved:  # reserved between this decorator and its use
                raise InvalidInput(f"fleet op {op!r} is reserved")
            self._handlers[op] = fn
            if reserve:
                self._reserved.add(op)
            return fn

        return register

    def on_resync(self, fn: Resync) -> Resync:
        """Run `fn` in each boot or reconnect resync, before the process reads `ready`."""
        self._resyncs.append(fn)
        return fn

    # -- the bus --------------------------------------------------------------------

    async def open(self) -> Bus:
        await self._connect()
        async with self._opening:
            if self._bus is None:
                bus = self.store.bus(self.root)
                await bus.open()
                try:
                    await bus.subscribe(self._deliver, self._hearing)
                except BaseException:
                    await bus.close()
                    raise
                self._bus = bus
        return self._bus

    async def close(self) -> None:
        # This process's life ends with its bus: its row is deleted while the bus can
        # still write (a worker whose task was cancelled, and that had no turn to leave
        # before the App closed, then finds it done, instead of a closed bus).
        if self.member is not None:
            member, self.member = self.member, None
            await member.leave()
        if self._bus is not None:
            bus, self._bus = self._bus, None
            await bus.close()

    def _deliver(self, message: dict[str, Any]) -> None:
        if message["type"] == "reply":
            waiting = self._waiting.get(str(message.get("id")))
            if waiting is not None:
                tally, changed = waiting
                tally.reply(str(message.get("name")), int(message.get("generation") or 0),
                            str(message.get("phase")), message.get("error"), message.get("detail"))
                changed.set()
        elif self.member is not None:
            self.member.receive(message)

    def _hearing(self, up: bool) -> None:
        if self.member is not None:
            self.member.hearing(up)

    # -- what processes do ------------------------------------------------------------

    async def member_for(self, kind: str, drain_s: float = 0.0) -> Member:
        """This process's membership as a `kind` (e.g. "worker", "server"), after the boot
        rules: not joined yet (`join()` claims the slot)."""
        check_unchanged(self._started)
        check_apply_window(self.settings, drain_s)
        bus = await self.open()
        await check_one_host(self.store)
        self.member = Member(bus, self.settings, kind, self._handlers, self._resync,
                             self.paused_queues)
        self.member.drain_s = drain_s
        return self.member

    async def _resync(self, _member: Member) -> None:
        check_unchanged(self._started)
        for fn in self._resyncs:
            await fn()

    # -- what an operator does -------------------------------------------------------

    async def census(self) -> Census:
        return await (await self.open()).census()

    async def workers(self) -> list[dict[str, Any]]:
        """The census: name, kind, generation, state (as it reads), host, pid, heartbeat age."""
        return describe(await self.census(), self.settings.stale_s)

    async def broadcast(self, op: str, payload: dict[str, Any] | None = None, *,
                        timeout_s: float | None = None,
                        targets: Sequence[str] | None = None) -> list[ReportRow]:
        """Send `op` to every live process (or the `targets` named) and report, per process,
        what became of it within `timeout_s` (see `broadcast.Outcome`)."""
        message = self._op_message(op, payload, targets)
        # An infinite or NaN window would never close (a broadcast that never returns).
        window_s = self.settings.broadcast_timeout_s if timeout_s is None else inputs.seconds(
            timeout_s, "timeout_s")
        bus = await self.open()
        if op in ("pause-queue", "resume-queue"):  # durable first: every claim reads it
            await self.store.queue_set_paused(QueuePauseParams(
                self.root, message["payload"]["queue"], op == "pause-queue"))
        tally = Tally(await bus.census(), self.settings.stale_s, targets)
        changed = asyncio.Event()
        self._waiting[message["id"]] = (tally, changed)
        try:
            await bus.publish(message)
            await self._collect(bus, tally, changed, window_s)
        finally:
            del self._waiting[message["id"]]
        return tally.close()

    async def _collect(self, bus: Bus, tally: Tally, changed: asyncio.Event,
                       window_s: float) -> None:
        """Until every expected life answered or is gone, re-reading the census once per
        heartbeat (departed lives are reported as such, not at the window's end)."""
        deadline = time.monotonic() + window_s
        next_look = time.monotonic() + self.settings.heartbeat_s
        while not tally.settled:
            now = time.monotonic()
            if now >= deadline:
                break
            changed.clear()
            await wait_set(changed, min(deadline, next_look) - now)
            if time.monotonic() >= next_look or time.monotonic() >= deadline:
                next_look = time.monotonic() + self.settings.heartbeat_s
                await self._recheck(bus, tally)
        if not tally.settled:
            await self._recheck(bus, tally)

    async def _recheck(self, bus: Bus, tally: Tally) -> None:
        try:
            tally.recheck(await bus.census())
        except StoreError:  # next look, or the report says missing: never applied
            pass

    def _op_message(self, op: str, payload: dict[str, Any] | None,
                    targets: Sequence[str] | None) -> dict[str, Any]:
        inputs.name(op, "a fleet op")
        if payload is not None and not isinstance(payload, dict):
            raise InvalidInput(f"a fleet payload is a JSON object, got {type(payload).__name__}")
        payload = dict(payload or {})
        if op in ("pause-queue", "resume-queue"):
            queue = payload.get("queue")
            try:
                inputs.queue(queue)
            except InvalidInput:
                raise InvalidInput(f'{op} needs {{"queue": "<name>"}}, got {payload!r}') from None
        if op == "evict-cache" and not isinstance(payload.get("prefix", ""), str):
            raise InvalidInput(f'evict-cache takes {{"prefix": "<text>"}}, got {payload!r}')
        if targets is not None and any(parse_name(name) is None for name in targets):
            raise InvalidInput(f"targets are slot names such as 'worker-2', got {list(targets)!r}")
        message = {"type": "op", "id": os.urandom(16).hex(), "op": op, "payload": payload,
                   "targets": None if targets is None else list(targets)}
        encode(message)  # too large or not JSON: refused here, before anything is sent
        return message

    async def recycle(self, kind: str = "worker") -> RecycleReport:
        """A rolling recycle of every ready `kind` process, one at a time, confirmed by the
        census (see `recycle`)."""
        return await roll(self, kind)

    async def paused_queues(self) -> set[str]:
        """The queues this fleet paused: the store's set, which every claim of the fleet
        skips (a worker's `member.paused` is what it last read of it)."""
        await self._connect()
        return await self.store.queue_list_paused(self.root)

    # -- built-in handlers --------------------------------------------------------------

    def _evict_cache(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {"evicted": self.cache.evict(str(payload.get("prefix", "")))}

    async def _queue_changed(self, _payload: dict[str, Any]) -> dict[str, Any]:
        """Re-read the durable set (the broadcaster wrote it): idempotent, and a process
        that missed an earlier op is right again too. (The claims do not wait for this:
        they read the set themselves.)"""
        paused = await self.paused_queues()
        if self.member is not None:
            self.member.paused = paused
        return {"paused": sorted(paused)}
