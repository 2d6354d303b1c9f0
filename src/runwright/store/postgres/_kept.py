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

A kept session the server ends while no one borrows it (a blip: `pg_terminate_backend`, a
restart) is taken back by the pool itself as asyncpg sees its socket close, which detaches
the proxy kept here: every call on it then raises InterfaceError ("released back to the
pool"). It is looked at before each loan, and one found closed or taken back is let go
for a fresh session, as the pool's own acquire reconnects a closed one: a cut of an idle
session costs no borrower an error (one did, and a worker of `runwright verify` on
PostgreSQL exited on it).

At rest the kept session is the pool's only one, and a borrower that finds it lent waits
for it (KEPT_WAIT_S at most; a few borrowers at once, in turn), handed over as the one
before leaves, instead of opening a second session: a worker's loops (its claims, its
rescuer, its fleet presence) each query once in a while, and two meeting kept a second
session open a quarter of the time (samples of an idle worker), above the three sessions
a worker holds at rest (README, "Sessions"). A burst grows the pool as before once more
borrowers than that come at once, or one waits its whole KEPT_WAIT_S, and goes on using
the pool's sessions while it has more than TWO.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg

__all__ = ["KEPT_WAIT_S", "Kept"]

# The longest a borrower waits for the kept session before it opens another: a statement
# or two of a loop at rest, on a busy machine.
KEPT_WAIT_S = 0.1
WAITERS = 3  # the most borrowers that wait for it at once
TWO = 2  # a pool this large or smaller is at rest: its kept session, an idle one going


class Kept:
    """The kept session of `pool`, lent by `lend` to one borrower at a time."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._conn: asyncpg.Connection | None = None
        self._lent = False
        self._closing = False
        # The borrowers waiting for the kept session, in turn: the one before hands it
        # over (the first's result set, `_lent` left set), unless its wait is over (cancelled).
        self._waiters: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[asyncpg.Connection]:
        handed = False
        if (self._lent and len(self._waiters) < WAITERS and not self._closing
                and self._pool.get_size() <= TWO):
            handed = await self._wait_for_it()
        if not handed:
            if self._lent or self._closing:
                async with self._pool.acquire() as conn:
                    yield conn
                return
            self._lent = True  # set before the first await: one borrower at a time
        try:
            conn = self._conn
            if conn is not None and not _usable(conn):
                self._conn = None
                await asyncio.shield(self._pool.release(conn))  # a no-op when it took it back
                conn = None
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
                if not clean or self._closing or not _usable(conn) or conn.is_in_transaction():
                    self._conn = None
                    await asyncio.shield(self._pool.release(conn))
        finally:
            self._give_back()

    def _give_back(self) -> None:
        """The kept session to its next waiter (still lent: the waiter's now), else free."""
        while self._waiters and self._waiters[0].done():  # waits over
            self._waiters.popleft()
        if self._waiters:
            self._waiters.popleft().set_result(None)
        else:
            self._lent = False

    async def _wait_for_it(self) -> bool:
        """Whether the kept session was handed over within KEPT_WAIT_S."""
        handoff: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(handoff)
        try:
            async with asyncio.timeout(KEPT_WAIT_S):
                await asyncio.shield(handoff)
        except TimeoutError:
            pass
        finally:  # handed over as the wait ended (or was cancelled): ours, or given back
            if handoff.done() and not handoff.cancelled():
                if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    self._give_back()  # cancelled as it was handed over: the next one's
            else:
                handoff.cancel()
        return handoff.done() and not handoff.cancelled()

    async def close(self) -> None:
        """Hand the kept session back (the pool's close waits for every session); a
        borrower holding it now hands it back as it leaves."""
        self._closing = True
        if not self._lent and self._conn is not None:
            conn, self._conn = self._conn, None
            await self._pool.release(conn)


def _usable(conn: asyncpg.Connection) -> bool:
    """Whether a kept session may be lent: open, and still the pool's loan to us."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:  # the pool took it back as its session ended
        return False
