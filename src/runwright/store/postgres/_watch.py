"""Waking a rescuer the moment a worker's session ends, instead of letting it find out at
its next poll.

A worker's liveness mark is a session-level advisory lock (see _marks.py). A session that
asks for that lock waits while the worker's session holds it, and PostgreSQL grants it the
moment that session ends: the grant is the wake. Each worker's rescuer keeps one such waiter,
on the next live mark after its own worker's (by id, wrapping round), so that every live
worker is watched by one other at the cost of one session a worker. The
rescuer's poll stays for what a ring misses (two neighbours dying at once, a worker that
joined after the waiter chose).

The waiter takes the lock and lets it go in the same statement: a worker taking its mark
again after a blip finds it busy for no longer than that statement, and tries again (its
retake tries every 50 ms). Its wait is bounded by `lock_timeout` (RETARGET_S), after which
it chooses again, so a worker that joined meanwhile is watched too. A lock granted just as
that timeout fires is the waiter's all the same: PostgreSQL raises the timeout and keeps
the grant (LockErrorCleanup), and a session lock outlives the error. Kept, it made the
dead worker look alive for as long as the waiter's session lived (its runs waited for
their lease, its row stayed), so the waiter lets it go and counts it a wake.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import asyncpg

from ...core._waiting import halt, wait_set

__all__ = ["RELEASE_IF_HELD", "RETARGET_S", "Watch"]

log = logging.getLogger("runwright.store.postgres")

RETARGET_S = 1.0  # how long one wait lasts before the waiter chooses its worker again
BACKOFF_MAX_S = 1.0
# The next live mark after `$2` in id order, else the first (a ring). The key's first half
# is this schema's namespace; pg_locks spans every database, hence the filter.
NEXT_MARK = """
SELECT objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND objid::bigint > 0 AND objid::bigint <> $2
ORDER BY objid::bigint < $2, objid::bigint
LIMIT 1
"""
# Granted only once the holder's session has ended; released at once.
WAIT_RELEASE = "SELECT pg_advisory_lock($1, $2), pg_advisory_unlock($1, $2)"
# After a lock_timeout: the lock if this session holds it after all (granted as the timeout
# fired), let go. A row (true): it was held, its holder's session has ended.
RELEASE_IF_HELD = """
SELECT pg_advisory_unlock($1, $2) FROM pg_locks
WHERE locktype = 'advisory' AND classid = $1::oid AND objid::bigint = $2 AND objsubid = 2
  AND granted AND pid = pg_backend_pid()
"""


class Watch:
    """One process's waiter: `wait()` returns when a watched mark was released."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], namespace: int,
                 transient: tuple[type[BaseException], ...]) -> None:
        self._connect = connect
        self._namespace = namespace
        self._unreachable: tuple[type[BaseException], ...] = (TimeoutError, *transient)
        self._released = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.wakes = 0  # marks seen released, for an operator's (and a test's) eyes

    def start(self, watcher: int) -> None:
        """Watch, from now on, the next live worker after `watcher` (the worker whose
        rescuer waits here)."""
        if self._task is not None and not self._task.done():
            return
        if self._task is not None and not self._task.cancelled() and self._task.exception():
            # Not the database (that is waited out inside): said loudly, then watched again.
            log.error("mark watch of worker %s failed; watching again", watcher,
                      exc_info=self._task.exception())
        self._task = asyncio.get_running_loop().create_task(self._run(watcher), name="mark-watch")

    async def wait(self, timeout_s: float) -> bool:
        """Until a watched mark is released (True) or `timeout_s` passes (False)."""
        woken = await wait_set(self._released, timeout_s)
        self._released.clear()
        return woken

    async def close(self) -> None:
        if self._task is not None:
            await halt(self._task)
            self._task = None

    async def _run(self, watcher: int) -> None:
        backoff_s = 0.05
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect()
                await conn.execute(f"SET lock_timeout = '{int(RETARGET_S * 1000)}ms'")
                backoff_s = 0.05
                await self._watch(conn, watcher)
            except (*self._unreachable, asyncpg.PostgresError) as exc:  # the database or our session is away
                log.info("mark watch: session lost (%s); taking one again", exc)
            finally:
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(backoff_s)
            backoff_s = min(BACKOFF_MAX_S, backoff_s * 2)

    async def _watch(self, conn: asyncpg.Connection, watcher: int) -> None:
        while True:
            target = await conn.fetchval(NEXT_MARK, self._namespace, watcher)
            if target is None:  # no other live worker: nothing to watch yet
                await asyncio.sleep(RETARGET_S)
                continue
            try:
                await conn.execute(WAIT_RELEASE, self._namespace, int(target))
            except asyncpg.LockNotAvailableError:
                if not await conn.fetchval(RELEASE_IF_HELD, self._namespace, int(target)):
                    continue  # still held after RETARGET_S: choose again
                # Granted as the timeout fired: its holder's session ended, as on a release.
            self.wakes += 1
            self._released.set()
