"""The process's own session: one session on the server that holds what must outlive a
statement, the store's LISTENs (and its fleet's, see _bus.py) and the liveness marks of
the workers this process runs (see _marks.py).

Each needs a session no other client shares (the direct URL behind a transaction pooler,
see _pooling.py); none needs it busy, so one serves them all: a worker holds this one, its
rescuer's waiter (_watch.py, busy inside a lock wait) and the pool's kept session at steady
state, where it held a session for each (and its fleet two more). They take turns on it
(`use`): asyncpg runs one operation at a time on a connection. Notifications arrive
whenever the session is idle between those turns, which are a statement or two long;
the fleet's presence statements take turns too (see _bus.py). Nothing that may wait on
a lock runs here (a registration's row is inserted on a pooled session: _workers.py),
since every holder would wait with it.

When the session ends (a blip, a restart, an operator's kill), every holder learns it from
its own termination listener and takes it again through `session`, which opens one new
session for all of them: the listener LISTENs again, each mark is taken again on it.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

import asyncpg

from ...core._waiting import bounded

__all__ = ["OwnSession"]


class OwnSession:
    """The session, opened on first use and again after it ends."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> None:
        self._connect = connect
        self._conn: asyncpg.Connection | None = None
        self._opening: asyncio.Lock | None = None  # made in the loop that uses it
        self._turn: asyncio.Lock | None = None
        self._closed = False  # till the store opens again: nothing opens a session

    def open(self) -> None:
        self._closed = False

    def current(self) -> asyncpg.Connection | None:
        """The session if it is open now, else None (none taken yet, or it ended)."""
        conn = self._conn
        return None if conn is None or conn.is_closed() else conn

    async def session(self) -> asyncpg.Connection:
        """The open session, opened now if there is none: one opening at a time, which
        every caller waiting meanwhile shares. Raises what connecting raised."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            conn = self.current()
            if conn is None:
                if self._closed:
                    raise ConnectionError("the store is closed")
                conn = self._conn = await self._connect()
            return conn

    @asynccontextmanager
    async def use(self, conn: asyncpg.Connection | None = None) -> AsyncIterator[asyncpg.Connection]:
        """A turn on the session (`conn`, when the caller holds one of before: used as it
        is, even closed, so that the caller's statement fails as on that session)."""
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:
            yield conn if conn is not None else await self.session()

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            try:  # as _marks.close_quietly, which imports this module
                await bounded(conn.close(), 2)
            except Exception:
                conn.terminate()
