"""The PostgreSQL store's notifications: LISTEN on the process's own session (see _own.py),
for the store's channels and for its fleet's (`listen_fleet`)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import Any, Callable, Sequence

import asyncpg

from .._hub import CANCEL, CHANNELS, QUEUED, RUN_CHANNELS, done_topic, events_topic
from ._base import DELIVERED, TRANSIENT, PostgresBase

__all__ = ["PostgresListening"]

log = logging.getLogger("runwright.store.postgres")


class PostgresListening(PostgresBase):
    """Change notifications (`Notifications`)."""

    # -- notifications --------------------------------------------------------------

    async def listen(self, runs: bool = True) -> None:
        await self._listening_to([name for name in (*CHANNELS, DELIVERED)
                                  if runs or name not in (*RUN_CHANNELS, DELIVERED)])

    async def listen_fleet(self, channel: str, heard: Callable[[str], None],
                           hearing: Callable[[bool], None]) -> None:
        """LISTEN to a fleet's `channel` beside the store's channels, on the same session:
        `heard` gets each payload, `hearing` False when the session goes (notifications
        sent meanwhile are lost) and True once it listens again. Several buses of one
        store (one root or several) each get theirs."""
        self.channels[channel] = channel
        self._fleet_heard.setdefault(channel, []).append(heard)
        self._hearing.append(hearing)
        await self._listening_to([channel])

    def unlisten_fleet(self, channel: str, heard: Callable[[str], None],
                       hearing: Callable[[bool], None]) -> None:
        """A closed bus hears no more (the channel's LISTEN stays till the store closes)."""
        with suppress(ValueError):
            self._fleet_heard.get(channel, []).remove(heard)
        with suppress(ValueError):
            self._hearing.remove(hearing)

    async def _listening_to(self, names: Sequence[str]) -> None:
        """LISTEN to these channels (by name) too, starting the listener if it is not."""
        if self._listener is None:
            self._listened = list(names)
            loop = asyncio.get_running_loop()
            self._listener_ready = loop.create_future()
            self._listener = loop.create_task(self._listen_forever(self._listener_ready))
        # Returns once the first session listens (or could not: the hub is degraded).
        assert self._listener_ready is not None
        await asyncio.wait([self._listener_ready, self._listener], return_when=asyncio.FIRST_COMPLETED)
        await self._listen_to(names)

    async def _listen_forever(self, ready: asyncio.Future[None]) -> None:
        """Keep LISTENing on the process's own session; while it is down the hub is
        `degraded`, so pollers poll fast instead of trusting silence."""
        backoff_s = 0.1
        while True:
            try:
                conn = await self._own.session()
            except (TimeoutError, *TRANSIENT, asyncpg.PostgresError) as exc:
                self.hub.degraded = True
                log.warning("listener cannot connect (%s); polling until it can", exc)
                if not ready.done():
                    ready.set_result(None)
                self._tell_hearing(False)
                await asyncio.sleep(backoff_s)
                backoff_s = min(5.0, backoff_s * 2)
                continue
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def on_lost(_conn: asyncpg.Connection, lost: asyncio.Future[None] = lost) -> None:
                if not lost.done():
                    lost.set_result(None)

            conn.add_termination_listener(on_lost)
            try:
                listened = 0  # the list may grow meanwhile (_listen_to): up to its end
                while listened < len(self._listened):
                    async with self._own.use(conn):
                        await conn.add_listener(self.channels[self._listened[listened]], self._on_notify)
                    listened += 1
                self._listening = conn
                self.hub.degraded = False
                backoff_s = 0.1
                if not ready.done():
                    ready.set_result(None)
                self._tell_hearing(True)
                self.hub.fire_all()  # anything missed while down: everyone re-reads
                await lost
                log.warning("listener connection lost; polling until it is back")
            except TRANSIENT as exc:
                log.warning("listener failed: %s", exc)
                # The session is the process's own: its other holders (the marks) take
                # a new one as this one ends (a half-read goodbye, see Marks.broken).
                conn.terminate()
            finally:
                self._listening = None
                self.hub.degraded = True
                self.hub.fire_all()
                conn.remove_termination_listener(on_lost)
            self._tell_hearing(False)

    def _tell_hearing(self, hearing: bool) -> None:
        """The fleet's subscriptions: told each change (deaf, then hearing again)."""
        if self._deaf != (not hearing):
            self._deaf = not hearing
            for tell in list(self._hearing):
                tell(hearing)

    async def _listen_to(self, names: Sequence[str]) -> None:
        """LISTEN to these channels too: on the listening session now, before this
        returns, and on every one after."""
        async with self._widening:  # one LISTEN at a time; a second caller waits for the first's
            new = [name for name in names if name not in self._listened]
            self._listened += new
            conn = self._listening
            if conn is None:  # between sessions: the next one LISTENs to them all
                return
            for name in new:
                try:
                    async with self._own.use(conn):
                        await conn.add_listener(self.channels[name], self._on_notify)
                except (*TRANSIENT, asyncpg.PostgresError) as exc:  # it is going: the next one listens
                    log.warning("listener could not LISTEN to %s: %s", name, exc)
                    # Ended here: asyncpg may never tell the listening loop of a session
                    # whose goodbye this statement half-read (see Marks.broken).
                    conn.terminate()
                    return

    def _on_delivered(self, payload: str) -> None:
        """`<run>,<fence>,<position>,<journal entry>`: kept for the wait of this process
        that lingers there (see `signal_take`), which the run's log growing wakes."""
        run_id, fence, position, result = payload.split(",", 3)
        key = (int(run_id), int(fence), int(position))
        if key in self._lingering_here:
            self._lingering_here[key] = result
        self.hub.fire(events_topic(key[0]))

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        heard = self._fleet_heard.get(channel)
        if heard is not None:
            for hear in list(heard):
                hear(payload)
        elif channel == self.channels["queued"]:
            self.hub.fire(QUEUED)
        elif channel == self.channels["cancel"]:
            self.hub.fire(CANCEL)
        elif channel == self.channels[DELIVERED]:
            self._on_delivered(payload)
        elif payload == "*":
            self.hub.fire_all()
        else:
            topic = events_topic if channel == self.channels["events"] else done_topic
            self.hub.fire_runs(topic, (int(i) for i in payload.split(",") if i))
