"""The PostgreSQL store's notifications: LISTEN on a session of its own."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

import asyncpg

from .._hub import CANCEL, QUEUED, RUN_CHANNELS, done_topic, events_topic
from ._base import TRANSIENT, PostgresBase
from ._marks import close_quietly

__all__ = ["PostgresListening"]

log = logging.getLogger("runwright.store.postgres")


class PostgresListening(PostgresBase):
    """Change notifications (`Notifications`)."""

    # -- notifications --------------------------------------------------------------

    async def listen(self, runs: bool = True) -> None:
        if self._listener is None:
            self._listened = [name for name in self.channels if runs or name not in RUN_CHANNELS]
            loop = asyncio.get_running_loop()
            self._listener_ready = loop.create_future()
            self._listener = loop.create_task(self._listen_forever(self._listener_ready))
        # Returns once the first session listens (or could not: the hub is degraded).
        assert self._listener_ready is not None
        await asyncio.wait([self._listener_ready, self._listener], return_when=asyncio.FIRST_COMPLETED)
        if runs:
            await self._listen_to(RUN_CHANNELS)

    async def _listen_forever(self, ready: asyncio.Future[None]) -> None:
        """Keep one LISTEN connection; while it is down the hub is `degraded`, so
        pollers poll fast instead of trusting silence."""
        backoff_s = 0.1
        while True:
            try:
                conn = await self._connect()
            except (TimeoutError, *TRANSIENT, asyncpg.PostgresError) as exc:
                self.hub.degraded = True
                log.warning("listener cannot connect (%s); polling until it can", exc)
                if not ready.done():
                    ready.set_result(None)
                await asyncio.sleep(backoff_s)
                backoff_s = min(5.0, backoff_s * 2)
                continue
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def on_lost(_conn: asyncpg.Connection) -> None:
                if not lost.done():
                    lost.set_result(None)

            conn.add_termination_listener(on_lost)
            try:
                listened = 0  # the list may grow meanwhile (_listen_to): up to its end
                while listened < len(self._listened):
                    await conn.add_listener(self.channels[self._listened[listened]], self._on_notify)
                    listened += 1
                self._listening = conn
                self.hub.degraded = False
                backoff_s = 0.1
                if not ready.done():
                    ready.set_result(None)
                self.hub.fire_all()  # anything missed while down: everyone re-reads
                await lost
                log.warning("listener connection lost; polling until it is back")
            except TRANSIENT as exc:
                log.warning("listener failed: %s", exc)
            finally:
                self._listening = None
                self.hub.degraded = True
                self.hub.fire_all()
                await close_quietly(conn)

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
                    await conn.add_listener(self.channels[name], self._on_notify)
                except (*TRANSIENT, asyncpg.PostgresError) as exc:  # it is going: the next one listens
                    log.warning("listener could not LISTEN to %s: %s", name, exc)
                    # Ended here: asyncpg may never tell the listening loop of a session
                    # whose goodbye this statement half-read (see Marks.broken).
                    conn.terminate()
                    return

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == self.channels["queued"]:
            self.hub.fire(QUEUED)
        elif channel == self.channels["cancel"]:
            self.hub.fire(CANCEL)
        elif payload == "*":
            self.hub.fire_all()
        else:
            topic = events_topic if channel == self.channels["events"] else done_topic
            self.hub.fire_runs(topic, (int(i) for i in payload.split(",") if i))
