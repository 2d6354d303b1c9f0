"""Liveness marks: a worker is alive while a session of its own holds its advisory lock.

PostgreSQL drops the lock the moment the session ends, which is how others learn at once
that a worker's process died. But a session also ends when the database restarts or an
operator (or a proxy) cuts it, and the worker is then alive and reconnecting, not dead.
So a mark that drops is taken again at once, on a new session, for the same worker id;
and a rescuer declares a worker dead only when its mark has stayed missing for
`MISSING_GRACE_S` (see `..liveness`). A blip costs no takeover; a SIGKILL still costs under
a second.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import asyncpg

from ...core._waiting import bounded, halt
from ...errors import StoreUnreachable

__all__ = ["Marks", "close_quietly"]

log = logging.getLogger("runwright.store.postgres")

RETAKE_BACKOFF_MAX_S = 0.5


class Marks:
    """The marks this process holds, one session each, re-taken when a session drops."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], namespace: int,
                 transient: tuple[type[BaseException], ...], registered_sql: str) -> None:
        self._connect = connect
        self._namespace = namespace
        self._registered_sql = registered_sql  # does worker $1 still have its row?
        self._transient = transient
        self._unreachable: tuple[type[BaseException], ...] = (TimeoutError, *transient)
        self._conns: dict[int, asyncpg.Connection] = {}
        self._retaking: dict[int, asyncio.Task[bool]] = {}
        self._lost: set[int] = set()  # declared dead meanwhile: the worker registers again

    def hold(self, worker_id: int, conn: asyncpg.Connection) -> None:
        """Keep `conn` (whose session holds the lock) as the worker's mark."""
        self._conns[worker_id] = conn
        conn.add_termination_listener(lambda _c: self._dropped(worker_id, conn))

    def holds(self, worker_id: int) -> bool:
        """Is the worker's mark this process's (held, or being taken again)?"""
        return worker_id in self._conns and worker_id not in self._lost

    def connection(self, worker_id: int) -> asyncpg.Connection | None:
        conn = self._conns.get(worker_id)
        return None if conn is None or conn.is_closed() else conn

    async def current(self, worker_id: int) -> asyncpg.Connection | None:
        """The worker's live mark session, re-taken first if it dropped; None when the
        worker was declared dead meanwhile. Raises StoreUnreachable while the database
        cannot be reached (that is not a death: the caller tries again)."""
        if worker_id in self._lost:
            return None
        conn = self.connection(worker_id)
        if conn is not None:
            return conn
        if worker_id not in self._conns and worker_id not in self._retaking:
            return None  # not ours (released, or never held)
        task = self._retake_soon(worker_id)
        try:
            kept = await bounded(asyncio.shield(task), 5)
        except TimeoutError as exc:
            raise StoreUnreachable("postgresql: liveness mark not yet taken again") from exc
        return self.connection(worker_id) if kept else None

    def broken(self, worker_id: int, conn: asyncpg.Connection) -> None:
        """A use of the worker's mark session failed as on a cut session: end it here and
        take the mark again now. asyncpg does not call a session's termination listeners
        when a statement meets the server's goodbye half-read ("cannot switch to state 11;
        another operation (2) is in progress"): a mark left to the next heartbeat stayed
        missing past the grace a rescuer gives it, and the live worker was taken over."""
        held = self._conns.get(worker_id)
        if held is None or held is not conn:
            return  # a session of before, already replaced
        held.terminate()  # its listener, if it never fired, fires now (_dropped)
        self._retake_soon(worker_id)

    def _dropped(self, worker_id: int, conn: asyncpg.Connection) -> None:
        if self._conns.get(worker_id) is conn:  # not a session we closed ourselves
            self._retake_soon(worker_id)

    def _retake_soon(self, worker_id: int) -> asyncio.Task[bool]:
        task = self._retaking.get(worker_id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._retake(worker_id))
            self._retaking[worker_id] = task
        return task

    async def _retake(self, worker_id: int) -> bool:
        """Take the lock again on a new session, until it is ours or the worker is gone."""
        backoff_s = 0.02
        while worker_id in self._conns:
            try:
                conn = await self._connect()
            except self._unreachable as exc:
                log.warning("liveness mark of worker %s: cannot reconnect (%s)", worker_id, exc)
            else:
                try:
                    if await self._lock_if_registered(conn, worker_id):
                        if worker_id not in self._conns:  # released meanwhile
                            await close_quietly(conn)
                            return False
                        self.hold(worker_id, conn)
                        if not conn.is_closed():  # else cut before its listener was there
                            log.info("liveness mark of worker %s taken again", worker_id)
                            return True
                    else:
                        await close_quietly(conn)
                        if worker_id in self._conns:  # declared dead while the mark was away
                            self._lost.add(worker_id)
                            return False
                except self._transient:
                    await close_quietly(conn)
                except BaseException:
                    await close_quietly(conn)
                    raise
            await asyncio.sleep(backoff_s)
            backoff_s = min(RETAKE_BACKOFF_MAX_S, backoff_s * 2)
        return False

    async def _lock_if_registered(self, conn: asyncpg.Connection, worker_id: int) -> bool:
        # Try, never wait: a session the server has not yet seen die still holds the
        # lock, and a blocked lock call would hang the worker's mark until it does.
        while not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", self._namespace, worker_id):
            await asyncio.sleep(0.05)
        # Locked first, then looked for: a rescuer that deletes the row after this read
        # sees the lock held, and one that deleted it before is seen here.
        return bool(await conn.fetchval(self._registered_sql, worker_id))

    async def release(self, worker_id: int) -> None:
        conn = self._conns.pop(worker_id, None)
        self._lost.discard(worker_id)
        task = self._retaking.pop(worker_id, None)
        if task is not None:
            await halt(task)
        if conn is not None:
            await close_quietly(conn)

    async def close(self) -> None:
        for worker_id in list(self._conns) + list(self._retaking):
            await self.release(worker_id)


async def close_quietly(conn: asyncpg.Connection) -> None:
    """Close, or if the session does not answer in 2 s, drop the socket."""
    try:
        await bounded(conn.close(), 2)
    except Exception:
        conn.terminate()
