"""The PostgreSQL store's workers: a session-bound liveness mark."""

from __future__ import annotations

from ...errors import StoreUnreachable
from .._params import WorkerHeartbeatParams, WorkerRegisterParams, WorkerWatchParams
from ..sql import _statements as q
from ..sql._columns import worker_row
from ..sql._workers import SqlWorkers
from ._base import SCHEMA_KEY, TRANSIENT, PostgresBase
from ._watch import NEXT_MARKS, Watch

__all__ = ["PostgresWorkers"]

# q.WORKER_INSERT with the id drawn before (see worker_register).
WORKER_INSERT_WITH_ID = """
INSERT INTO workers (id, host, pid, queues, tasks, started_at, heartbeat_at, version, majors)
OVERRIDING SYSTEM VALUE VALUES ($8, $1, $2, $3, $4, $5, $5, $6, $7)
"""


class PostgresWorkers(SqlWorkers, PostgresBase):
    """Workers (`WorkerStore`): what differs from `..sql.workers`, which it extends."""

    # -- workers: a session-bound liveness mark -----------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        """Register, holding the worker's session-level advisory lock on the process's own
        session (see _own.py): the lock lives exactly as long as that session, which is
        how others learn at once that this worker died.

        The id is drawn and its lock taken on the own session first, then the row is
        inserted on a pooled one: its transaction may wait for an unrunnable sweep (see
        _hold_registrations) or for a migration, and the own session, which carries the
        process's LISTENs, its other marks and its fleet's presence, must not wait with
        it (fifty workers starting at once behind PgBouncer saw their fleet lives lapse).
        Locked before the row commits: whoever sees the row sees the lock."""
        now = self.clock.now(params.now)
        try:
            async with self._own.use() as conn:
                try:
                    worker_id = int(await conn.fetchval(
                        "SELECT n FROM (SELECT nextval(pg_get_serial_sequence($2, 'id')) AS n) AS drawn,"
                        " pg_advisory_lock($1, n::int)", self.lock_namespace, f'"{self.schema}".workers'))
                except TRANSIENT:
                    conn.terminate()  # half-read, maybe: the process's next session serves
                    raise
        except (TimeoutError, *TRANSIENT) as exc:
            # The session cut mid-registration (a blip, a restart), or none to be had: a
            # StoreError, which a worker's start rides out as any other blink, not asyncpg's
            # own error (raw, it crashed the starting worker: `runwright verify` on
            # PostgreSQL met it).
            raise StoreUnreachable(f"postgresql: cannot register: {type(exc).__name__}: {exc}") from exc
        try:
            async with self._conn() as pooled, pooled.transaction():
                # Shared with other registrations, never beside an unrunnable sweep (see
                # _hold_registrations): a sweep either sees this row or closed its runs first.
                await pooled.execute("SELECT pg_advisory_xact_lock_shared($1, $2)", self.lock_namespace,
                                     SCHEMA_KEY)
                await pooled.execute(self._sql(WORKER_INSERT_WITH_ID), *worker_row(params, now), worker_id)
        except BaseException as exc:
            await self._marks.let_go(worker_id)
            if isinstance(exc, StoreUnreachable):  # said as the own session's cut is
                raise StoreUnreachable(f"postgresql: cannot register: {exc}") from exc
            raise
        self._marks.hold(worker_id, conn)
        return worker_id

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        """False only when the worker was declared dead (it then registers again); a
        database that cannot be reached raises StoreUnreachable, which is no death."""
        conn = await self._marks.current(params.worker_id)
        if conn is None:
            return False
        try:
            async with self._own.use(conn):
                await self._observe_clock(conn)
                status = await conn.execute(self._sql(q.WORKER_HEARTBEAT), params.worker_id,
                                            self.clock.now(params.now))
        except TRANSIENT as exc:
            self._marks.broken(params.worker_id, conn)
            raise StoreUnreachable(f"postgresql: heartbeat: {exc}") from exc
        return bool(status == "UPDATE 1")

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """Woken the moment the session of a worker this one watches ends (the next in
        the ring, the next of its own machine: see _watch.py), or when a missing mark's
        grace ends, else after `timeout_s`."""
        watch = self._watches.get(params.worker_id)
        if watch is None:
            await self._drop_watches()
            watch = self._watches[params.worker_id] = Watch(self._connect, self.lock_namespace, TRANSIENT,
                                                            self._sql(NEXT_MARKS))
        watch.start(params.worker_id)
        grace_left_s = self._unmarked.next_look_in(self.clock.now())
        if grace_left_s is not None and grace_left_s < params.timeout_s:
            await watch.wait(grace_left_s)
            return True
        return await watch.wait(params.timeout_s)

    async def _drop_watches(self) -> None:
        """Close the watches of workers whose mark this process holds no more (declared
        dead, a worker registered again under a new id): one session each, kept for nothing."""
        for worker_id in [wid for wid in self._watches if not self._marks.holds(wid)]:
            await self._watches.pop(worker_id).close()

    async def worker_deregister(self, worker_id: int) -> None:
        try:
            await super().worker_deregister(worker_id)
        finally:
            await self._marks.release(worker_id)
            watch = self._watches.pop(worker_id, None)
            if watch is not None:
                await watch.close()
