"""Liveness marks: a worker is alive while a session of its process holds its advisory lock
(the process's own session, see _own.py, which holds its LISTENs too).

PostgreSQL drops the lock the moment the session ends, which is how others learn at once
that a worker's process died. But a session also ends when the database restarts or an
operator (or a proxy) cuts it, and the worker is then alive and reconnecting, not dead.
So a mark that drops is taken again at once, on the process's new session, for the same worker id;
and a rescuer declares a worker dead only when its mark has stayed missing for
`MISSING_GRACE_S` (see `.._liveness`). A blip costs no takeover; a SIGKILL costs nothing
more where a rescuer can judge the pid (its machine), the grace elsewhere.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from ...core._waiting import bounded, halt
from ...errors import StoreUnreachable
from ._own import OwnSession

__all__ = ["Marks", "close_quietly"]

log = logging.getLogger("runwright.store.postgres")

# Well inside MISSING_GRACE_S: once the database answers again, a mark is retaken several
# times over before any rescuer can count it dead.
RETAKE_BACKOFF_MAX_S = 0.2
# Let go of worker $2's mark if this session holds it (a retake cancelled midway may
# have taken it): never a server warning for a lock not held.
UNLOCK_IF_HELD = """
SELECT pg_advisory_unlock($1, $2) FROM pg_locks
WHERE locktype = 'advisory' AND classid = $1::oid AND objid::bigint = $2 AND objsubid = 2
  AND granted AND pid = pg_backend_pid()
"""


class Marks:
    """The marks this process holds, on its own session, re-taken when the session drops."""

    def __init__(self, own: OwnSession, namespace: int,
                 transient: tuple[type[BaseException], ...], registered_sql: str) -> None:
        self._own = own
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
        if conn.is_closed():  # ended before its listener was there: taken again now
            self._retake_soon(worker_id)

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
        take the mark again now (the listener, whose session it is too, LISTENs again).
        asyncpg does not call a session's termination listeners when a statement meets
        the server's goodbye half-read ("cannot switch to state 11; another operation
        (2) is in progress"): a mark left to the next heartbeat stayed
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
        """Take the lock again on the new session, until it is ours or the worker is gone."""
        backoff_s = 0.02
        while worker_id in self._conns:
            try:
                conn = await self._own.session()
            except self._unreachable as exc:
                log.warning("liveness mark of worker %s: cannot reconnect (%s)", worker_id, exc)
            else:
                try:
                    if await self._lock_if_registered(conn, worker_id):
                        if worker_id not in self._conns:  # released meanwhile
                            await self._unlock(conn, worker_id)
                            return False
                        self.hold(worker_id, conn)
                        if not conn.is_closed():  # else cut before its listener was there
                            log.info("liveness mark of worker %s taken again", worker_id)
                            return True
                    else:
                        await self._unlock(conn, worker_id)
                        if worker_id in self._conns:  # declared dead while the mark was away
                            self._lost.add(worker_id)
                            return False
                except self._transient:
                    conn.terminate()  # half-broken: the process's next session takes over
                # A cancellation (a release) lets go of the lock in `release`.
            await asyncio.sleep(backoff_s)
            backoff_s = min(RETAKE_BACKOFF_MAX_S, backoff_s * 2)
        return False

    async def _lock_if_registered(self, conn: asyncpg.Connection, worker_id: int) -> bool:
        # Try, never wait: a session the server has not yet seen die still holds the
        # lock, and a blocked lock call would hang the worker's mark (and the process's
        # LISTENs, on the same session) until it does.
        while True:
            async with self._own.use(conn):
                if await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", self._namespace, worker_id):
                    break
            await asyncio.sleep(0.05)
        # Locked first, then looked for: a rescuer that deletes the row after this read
        # sees the lock held, and one that deleted it before is seen here.
        async with self._own.use(conn):
            return bool(await conn.fetchval(self._registered_sql, worker_id))

    async def _unlock(self, conn: asyncpg.Connection, worker_id: int) -> None:
        """Let go of the worker's mark on `conn`, if it is open and holds it; a session
        that fails meanwhile is ended (its locks go with it)."""
        if conn.is_closed():
            return
        try:
            async with self._own.use(conn):
                await conn.execute(UNLOCK_IF_HELD, self._namespace, worker_id)
        except self._unreachable:
            conn.terminate()

    async def let_go(self, worker_id: int) -> None:
        """Let go of a mark taken on the own session but never held (its registration
        failed after): unlocked there, or ended with the session."""
        current = self._own.current()
        if current is not None:
            await self._unlock(current, worker_id)

    async def release(self, worker_id: int) -> None:
        conn = self._conns.pop(worker_id, None)
        self._lost.discard(worker_id)
        task = self._retaking.pop(worker_id, None)
        if task is not None:
            await halt(task)
        # On the session of now: a retake cut short may have taken the mark there.
        current = self._own.current()
        if current is not None:
            await self._unlock(current, worker_id)
        if conn is not None and conn is not current and not conn.is_closed():
            conn.terminate()  # a session of before, not the process's any more

    async def close(self) -> None:
        for worker_id in list(self._conns) + list(self._retaking):
            await self.release(worker_id)


async def close_quietly(conn: asyncpg.Connection) -> None:
    """Close, or if the session does not answer in 2 s, drop the socket."""
    try:
        await bounded(conn.close(), 2)
    except Exception:
        conn.terminate()
