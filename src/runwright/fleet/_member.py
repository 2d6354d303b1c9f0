"""This process's life in the fleet: its slot, its state, its heartbeat, its handlers.

A life begins with a claim of the lowest free slot of its kind (state `resyncing`),
becomes `ready` when its boot resync is done, and handles ops only while `ready`. A
graceful stop writes `recycling` with its drain seconds, keeps heartbeating through the
drain, then deletes the row. A heartbeat that cannot reach the store keeps trying: a
blip shorter than the TTL keeps the life; a heartbeat that finds its life ended (the TTL
passed, or a newer generation holds the slot) begins a new life, resyncing first.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from typing import Any, Awaitable, Callable, Coroutine, Mapping

from ..core._resilience import jittered
from ..core._waiting import bounded, halt
from ..errors import InvalidInput, StoreError
from ..observe._logs import event
from ..store._bus import Bus, Writing
from ..store._liveness import this_machine
from ._presence import Life, State, choose_ordinal
from ._settings import FleetSettings

__all__ = ["Handler", "Member"]

INFO, WARNING, ERROR = logging.INFO, logging.WARNING, logging.ERROR
Handler = Callable[[dict[str, Any]], Any]  # payload -> detail (JSON), sync or async
CLAIM_TRIES = 20  # claims lost to a racing process before giving up (each re-reads)
STOP_WRITE_S = 5.0  # longest a stop waits on the fleet's store: the TTL covers the rest


class Member:
    """One process's membership; made by `Fleet.member`, driven by its process."""

    def __init__(self, bus: Bus, settings: FleetSettings, kind: str,
                 handlers: Mapping[str, Handler],
                 resync: Callable[[Member], Awaitable[None]],
                 read_paused: Callable[[], Awaitable[set[str]]]) -> None:
        self.bus = bus
        self.settings = settings
        self.kind = kind
        self.life: Life | None = None
        self.state = State.RESYNCING
        self.drain_s = 0.0
        # The queues paused fleet-wide, as last read (`read_paused`, the store's set): the
        # worker leaves them out of its claims, and the store's claim skips them anyway.
        self.paused: set[str] = set()
        self._read_paused = read_paused
        # Queues a worker serves besides its own while an op asks it to (`serve_extra`):
        # each until its deadline on this process's monotonic clock, so that an asker that
        # died, and renews no more, stops being served.
        self._extra: dict[str, float] = {}
        # What the worker says of itself, for an op that needs it: its lease.
        self.lease_s = 0.0
        # What a `recycle` op does here (a worker: its graceful stop); None: not recyclable.
        self.on_recycle: Callable[[], None] | None = None
        self._handlers = handlers
        self._resync = resync
        self._heartbeat: asyncio.Task[None] | None = None
        self._applying: set[asyncio.Task[None]] = set()
        # One write of the row at a time: a state change and a heartbeat that both found
        # the life ended must not begin two new lives.
        self._writing_turn = asyncio.Lock()
        self._host, self._pid = this_machine(), os.getpid()
        self._deaf = False  # the bus dropped while we were ready: resync when it is back
        self._left = False  # `leave()` ran: a second one (the App closing after) does nothing
        # The level of the "joined the fleet" and "left the fleet" lines: a worker's are
        # INFO; `runwright serve` prints its own start and keeps them DEBUG.
        self.presence_level = INFO

    def serve_extra(self, queue: str, for_s: float) -> None:
        """Serve `queue` besides the worker's own for `for_s` seconds from now (again:
        the deadline moves on)."""
        self._extra[queue] = time.monotonic() + for_s

    def stop_extra(self, queue: str) -> bool:
        """Serve `queue` no more (if it was an extra one): whether it was."""
        return self._extra.pop(queue, None) is not None

    def extra_queues(self) -> list[str]:
        """The extra queues served now: those past their deadline are dropped, and so is
        a paused one (pausing it is how its asker ends it for good, however stale the
        worker that serves it)."""
        now = time.monotonic()
        for queue in [q for q, until in self._extra.items() if until <= now or q in self.paused]:
            del self._extra[queue]
        return sorted(self._extra)

    @property
    def name(self) -> str | None:
        return None if self.life is None else self.life.name

    def _writing(self) -> Writing:
        return Writing(self.state, self._host, self._pid, self.drain_s, self.settings.ttl_s)

    # -- the life ---------------------------------------------------------------------

    async def join(self) -> Life:
        """Claim the lowest free slot of this kind, `resyncing`, and start heartbeating."""
        self.state = State.RESYNCING
        self.life = await self._claim()
        event(self.presence_level, "joined the fleet", fleet=self.settings.root, name=self.life.name,
              generation=self.life.generation)
        if self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat(), name="fleet-heartbeat")
        return self.life

    async def _claim(self) -> Life:
        for _ in range(CLAIM_TRIES):
            ordinal = choose_ordinal(await self.bus.census(), self.kind)
            generation = await self.bus.slot_claim(self.kind, ordinal, self._writing())
            if generation is not None:
                return Life(self.kind, ordinal, generation)
        raise StoreError(f"fleet {self.settings.root}: lost {CLAIM_TRIES} slot claims in a row")

    async def resync(self) -> None:
        """The boot (or reconnect) resync: what is durable in the store, then the user's."""
        self.paused = await self._read_paused()
        await self._resync(self)

    async def ready(self) -> None:
        await self._write(State.READY)

    async def recycling(self, drain_s: float) -> None:
        """Leaving gracefully: `recycling`, announcing `drain_s`, until `leave()`. Waits
        at most STOP_WRITE_S: a slow store never delays a drain (the heartbeat writes it).
        Once recycling, a second call changes nothing (a server calls it at its first
        signal, and its lifespan again at the end)."""
        if self.state is State.RECYCLING:
            return
        self.drain_s = drain_s
        self.state = State.RECYCLING
        try:
            await bounded(self._write(State.RECYCLING), STOP_WRITE_S)
        except TimeoutError:
            event(WARNING, "fleet state recycling not written yet", name=self.name)

    async def leave(self) -> None:
        """Stop heartbeating and delete the row (the slot is free for the next life).
        Once: the App's close leaves for a process that has not (its bus closes next), and
        the process's own leave after that finds nothing left to do."""
        if self._left:
            return
        self._left = True
        if self._heartbeat is not None:
            await halt(self._heartbeat)
            self._heartbeat = None
        for task in list(self._applying):
            task.cancel()
        if self.life is not None:
            try:
                await bounded(self.bus.presence_delete(self.life), STOP_WRITE_S)
            except (StoreError, TimeoutError) as exc:
                event(WARNING, "could not delete the fleet row; it expires by its TTL",
                      name=self.life.name, error=str(exc))
            event(self.presence_level, "left the fleet", name=self.life.name, generation=self.life.generation)

    async def watch(self) -> None:
        """Watch the heartbeat (a supervised side task): raises if it died; returns only
        when it ended (the life ended during a drain). Cancelling the watch leaves the
        heartbeat running: it beats through the drain, until `leave()`."""
        while self._heartbeat is not None and not self._heartbeat.done():
            await asyncio.sleep(self.settings.heartbeat_s)
        if self._heartbeat is not None and not self._heartbeat.cancelled():
            self._heartbeat.result()

    async def _write(self, state: State) -> None:
        """Write `state` now; never raises for the store (the next heartbeat writes it),
        so a stop request always goes on to its drain."""
        self.state = state
        try:
            await self._beat_once()
        except StoreError as exc:
            event(WARNING, "fleet state not written yet", state=state.value, error=str(exc))

    async def _beat(self) -> None:
        while self.life is not None:
            await asyncio.sleep(jittered(self.settings.heartbeat_s))
            try:
                await self._beat_once()
            except StoreError as exc:  # a blip: the life lasts while its TTL does
                event(WARNING, "fleet heartbeat failed; trying again", name=self.name, error=str(exc))

    async def _beat_once(self) -> None:
        async with self._writing_turn:
            await self._refresh_or_renew()

    async def _refresh_or_renew(self) -> None:
        if self.life is None:
            return
        if await self.bus.presence_refresh(self.life, self._writing()):
            if self.state is State.READY:
                self.paused = await self._read_paused()  # a lost op heals here
            return
        if self.state is State.RECYCLING:  # leaving anyway: no new life to begin
            event(WARNING, "fleet life ended during the drain", name=self.life.name)
            self.life = None
            return
        await self._new_life()

    async def _new_life(self) -> None:
        """The life ended while we were away (longer than the TTL): begin another, which
        resyncs before it reads ready again."""
        old = self.life
        before = self.state
        self.state = State.RESYNCING  # what the new life writes first
        try:
            self.life = await self._claim()
        except BaseException:
            self.state = before  # the next heartbeat tries again, as it was
            raise
        ready = before is State.READY
        event(WARNING, "fleet life ended while away; a new one began",
              previous=None if old is None else f"{old.name}@{old.generation}",
              name=self.life.name, generation=self.life.generation)
        if ready:
            await self.resync()
            self.state = State.READY
            await self.bus.presence_refresh(self.life, self._writing())

    def hearing(self, up: bool) -> None:
        """The bus subscription dropped (False) or is back (True). Ops sent while it was
        down are lost, so a ready process reads `resyncing` from the drop, and resyncs
        when it hears again before it reads `ready` (a broadcast meanwhile reports it so)."""
        if not up:
            if self.state is State.READY:
                self._deaf = True
                self._spawn(self._write(State.RESYNCING))
        elif self._deaf:
            self._deaf = False
            self._spawn(self._resync_after_gap())

    async def _resync_after_gap(self) -> None:
        if self.state is not State.RESYNCING:  # recycling meanwhile, or a new life resynced
            return
        try:
            await self.resync()
        except StoreError as exc:  # the next drop and return, or the heartbeat, heals it
            event(WARNING, "fleet resync after a gap failed; the process stays resyncing",
                  name=self.name, error=str(exc))
            return
        if self.state is State.RESYNCING:
            await self._write(State.READY)
            event(INFO, "fleet resynced after a gap in the bus", name=self.name)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._applying.add(task)
        task.add_done_callback(self._applying.discard)

    # -- ops ----------------------------------------------------------------------------

    def receive(self, message: dict[str, Any]) -> None:
        """An op from the bus: applied if it is addressed to this life and we are ready."""
        targets = message.get("targets")
        if self.life is None or self.state is not State.READY:
            return
        if targets is not None and self.life.name not in targets:
            return
        self._spawn(self._apply(self.life, message))

    async def _apply(self, life: Life, message: dict[str, Any]) -> None:
        op = str(message.get("op"))
        await self._reply(life, message, "ack")
        handler = self._handlers.get(op)
        try:
            if handler is None:
                raise LookupError(f"no handler for op {op!r} in this process")
            if op == "recycle" and self.on_recycle is None:
                raise RuntimeError(f"a {self.kind} process cannot be recycled by the fleet")
            detail = handler(dict(message.get("payload") or {}))
            if inspect.isawaitable(detail):
                detail = await detail
        except Exception as exc:
            event(WARNING, f"fleet op {op} failed here: {exc}", name=life.name)
            await self._reply(life, message, "failed", error=f"{type(exc).__name__}: {exc}")
            return
        await self._reply(life, message, "applied", detail=detail)
        if op == "recycle" and self.on_recycle is not None:
            self.on_recycle()  # after the reply: the report must not wait on our drain

    async def _reply(self, life: Life, message: dict[str, Any], phase: str, error: str | None = None,
                     detail: Any = None) -> None:
        try:
            await self.bus.publish({"type": "reply", "id": message.get("id"), "name": life.name,
                                          "generation": life.generation, "phase": phase,
                                          "error": error, "detail": detail})
        except InvalidInput as exc:  # a detail too large to carry: say so, not "applied"
            await self._reply(life, message, "failed", error=f"the handler's result: {exc}")
        except StoreError as exc:  # the broadcaster reads this life as missing: honest
            event(WARNING, "fleet reply not sent", name=life.name, error=str(exc))
