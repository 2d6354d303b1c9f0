"""Waking a rescuer the moment a worker's session ends, instead of letting it find out at
its next poll.

A worker's liveness mark is a session-level advisory lock (see _marks.py). A session that
asks for that lock waits while the worker's session holds it, and PostgreSQL grants it the
moment that session ends: the grant is the wake. Each worker's rescuer keeps one such waiter,
on the next live mark after its own worker's (by id, wrapping round), so that every live
worker is watched by one other at the cost of one session a worker. The
rescuer's poll stays for what a ring misses (two neighbours dying at once, a worker that
joined after the waiter chose).

The ring's watcher of a worker is often of another machine (`runwright worker -p 2` on two
machines registers in any order), and one of another machine cannot judge a dead worker by
its pid: it gives it the grace (see .._liveness). So a worker whose machine (its host, as
`this_machine` wrote it) runs others also watches the next of them after itself (by id,
wrapping round), unless its ring waiter already does: every worker with a sibling is then
watched by a sibling, which judges it by its pid and takes a real death over at once. That
second waiter has a session of its own only while there is such a sibling to watch; a
worker alone on its machine never opens one.

The waiter takes the lock and lets it go in the same statement: a worker taking its mark
again after a blip finds it busy for no longer than that statement, and tries again (its
retake tries every 50 ms). Its wait is bounded by `lock_timeout` (RETARGET_S), after which
it chooses again, so a worker that joined meanwhile is watched too; a waiter whose mark is
no longer the one to wait for when it chooses again wakes its rescuer once more (the mark
may have dropped between two waits, or been held for an instant by another waiter as the
rescuer looked after the release). A lock granted just as that timeout fires is the
waiter's all the same: PostgreSQL raises the timeout and keeps the grant
(LockErrorCleanup), and a session lock outlives the error. Kept, it made the dead worker
look alive for as long as the waiter's session lived (its runs waited for their lease, its
row stayed), so the waiter lets it go and counts it a wake.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import asyncpg

from ...core._waiting import halt, wait_set

__all__ = ["NEXT_MARKS", "RELEASE_IF_HELD", "RETARGET_S", "Watch"]

log = logging.getLogger("runwright.store.postgres")

RETARGET_S = 1.0  # how long one wait lasts before the waiter chooses its worker again
BACKOFF_MAX_S = 1.0
# Two targets for the waiters of worker `$2`: the ring's, the next live mark after `$2` in
# id order, else the first; and the sibling's, the next live mark after `$2` (the same way
# round) of a worker that wrote `$2`'s host (waited for only where the ring's waiter does not).
# The key's first half is this schema's namespace; pg_locks spans every database, hence
# the filter. The store names the workers table in its schema (`PostgresStore._sql`).
NEXT_MARKS = """
WITH live AS (
  SELECT objid::bigint AS id FROM pg_locks
  WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND granted
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND objid::bigint > 0 AND objid::bigint <> $2
), ring AS (
  SELECT id FROM live ORDER BY id < $2, id LIMIT 1
), sibling AS (
  SELECT live.id FROM live JOIN workers w ON w.id = live.id
  WHERE w.host = (SELECT host FROM workers WHERE id = $2)
  ORDER BY live.id < $2, live.id LIMIT 1
)
SELECT (SELECT id FROM ring), (SELECT id FROM sibling)
"""
RING, SIBLING = 0, 1  # which of NEXT_MARKS's targets a waiter waits on
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
                 transient: tuple[type[BaseException], ...], next_marks: str) -> None:
        self._connect = connect
        self._namespace = namespace
        self._next_marks = next_marks  # NEXT_MARKS, its tables named in the store's schema
        self._unreachable: tuple[type[BaseException], ...] = (TimeoutError, *transient)
        self._released = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sibling: asyncio.Task[None] | None = None  # while a sibling is to be watched
        self._ring_on: int | None = None  # the mark the ring's waiter waits for now
        self.wakes = 0  # marks seen released, for an operator's (and a test's) eyes

    def start(self, watcher: int) -> None:
        """Watch, from now on, the next live worker after `watcher` (the worker whose
        rescuer waits here), and the next of its own machine."""
        if self._task is not None and not self._task.done():
            return
        if self._task is not None and not self._task.cancelled() and self._task.exception():
            # Not the database (that is waited out inside): said loudly, then watched again.
            log.error("mark watch of worker %s failed; watching again", watcher,
                      exc_info=self._task.exception())
        self._task = asyncio.get_running_loop().create_task(self._run(watcher, RING), name="mark-watch")

    def _start_sibling(self, watcher: int) -> None:
        if self._task is None or (self._sibling is not None and not self._sibling.done()):
            return  # closed (a ring task that outlived its cancel), or watching already
        if self._sibling is not None and not self._sibling.cancelled() and self._sibling.exception():
            log.error("sibling mark watch of worker %s failed; watching again", watcher,
                      exc_info=self._sibling.exception())
        self._sibling = asyncio.get_running_loop().create_task(self._run(watcher, SIBLING),
                                                               name="mark-watch-sibling")

    async def wait(self, timeout_s: float) -> bool:
        """Until a watched mark is released (True) or `timeout_s` passes (False)."""
        woken = await wait_set(self._released, timeout_s)
        self._released.clear()
        return woken

    async def close(self) -> None:
        tasks = [task for task in (self._task, self._sibling) if task is not None]
        self._task = self._sibling = None
        if tasks:
            await halt(*tasks)

    async def _run(self, watcher: int, which: int) -> None:
        backoff_s = 0.05
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._connect()
                await conn.execute(f"SET lock_timeout = '{int(RETARGET_S * 1000)}ms'")
                backoff_s = 0.05
                if not await self._watch(conn, watcher, which):
                    return  # no sibling to watch (any more): its session goes with it
            except (*self._unreachable, asyncpg.PostgresError) as exc:  # the database or our session is away
                log.info("mark watch: session lost (%s); taking one again", exc)
            finally:
                if which == RING:
                    self._ring_on = None
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(backoff_s)
            backoff_s = min(BACKOFF_MAX_S, backoff_s * 2)

    async def _watch(self, conn: asyncpg.Connection, watcher: int, which: int) -> bool:
        """Wait on `which` target, chosen again after each release and every RETARGET_S;
        False when the sibling's waiter has none (the ring's waits for one)."""
        watched: int | None = None  # the mark this waiter waited for last
        while True:
            ring, sibling = await conn.fetchrow(self._next_marks, self._namespace, watcher)
            if which == RING:
                target = self._ring_on = ring
                if sibling is not None and sibling != ring:
                    self._start_sibling(watcher)
            else:  # the ring's waiter waits for it already, or is about to: none of our own
                target = None if sibling == self._ring_on else sibling
            if watched is not None and target != watched:
                # The mark waited for last is not the one to wait for now: it may have
                # dropped between two waits, or been released as the rescuer looked while
                # another waiter held it for an instant (the look saw it held): look again.
                self._released.set()
            watched = target
            if target is None:
                if which == SIBLING:
                    return False
                await asyncio.sleep(RETARGET_S)  # no other live worker: nothing to watch yet
                continue
            try:
                await conn.execute(WAIT_RELEASE, self._namespace, int(target))
            except asyncpg.LockNotAvailableError:
                if not await conn.fetchval(RELEASE_IF_HELD, self._namespace, int(target)):
                    continue  # still held after RETARGET_S: choose again
                # Granted as the timeout fired: its holder's session ended, as on a release.
            self.wakes += 1
            self._released.set()
