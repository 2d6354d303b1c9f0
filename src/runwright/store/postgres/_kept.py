"""One session of the store's pool kept out of it between uses.

asyncpg's `Pool.acquire` and `release` cost about 40 µs of CPU and of latency a use on
this project's machines (measured: a shielded task and an inactivity timer per release,
a queue per acquire), a tenth of a one-row submission's round trip. Most calls a process
makes come one at a time (a submitter's loop, a worker's finish, a page's reads): the
first borrower takes the kept session with no pool work, and one that finds it lent goes
to the pool as before, so nothing waits on it.

A session is kept only while it is known clean: a borrower that leaves with an error
other than the server's refusal of a statement (a cancellation mid-query, a cut
connection), or inside a transaction, hands it back to the pool, whose release waits out
a cancellation and drops a closed session; the next borrower takes a fresh one.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg

__all__ = ["Kept"]


class Kept:
    """The kept session of `pool`, lent by `lend` to one borrower at a time."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._conn: asyncpg.Connection | None = None
        self._lent = False
        self._closing = False

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[asyncpg.Connection]:
        if self._lent or self._closing:
            async with self._pool.acquire() as conn:
                yield conn
            return
        self._lent = True  # set before the first await: one borrower at a time
        try:
            conn = self._conn
            if conn is None:
                conn = self._conn = await self._pool.acquire()
            clean = False
            try:
                yield conn
                clean = True
            except asyncpg.PostgresError as exc:
                # The server refused a statement: the session is as it was, unless the
                # error is about the connection itself.
                clean = not isinstance(exc, (asyncpg.PostgresConnectionError, asyncpg.AdminShutdownError))
                raise
            finally:
                if not clean or self._closing or conn.is_closed() or conn.is_in_transaction():
                    self._conn = None
                    await asyncio.shield(self._pool.release(conn))
        finally:
            self._lent = False

    async def close(self) -> None:
        """Hand the kept session back (the pool's close waits for every session); a
        borrower holding it now hands it back as it leaves."""
        self._closing = True
        if not self._lent and self._conn is not None:
            conn, self._conn = self._conn, None
            await self._pool.release(conn)
