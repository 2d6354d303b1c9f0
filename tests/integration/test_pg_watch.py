"""A PostgreSQL rescuer is woken the moment a mark it watches drops (store/postgres/watch.py).

Its waiter waits for the watched worker's lock with a lock_timeout, and PostgreSQL may
grant the lock just as that timeout fires: it raises the timeout and keeps the grant
(LockErrorCleanup), and a session lock outlives the error. A waiter that kept it made the
dead worker look alive for as long as its session lived (its run taken over only when its
lease expired, 30 s later; its row never removed): the waiter lets such a lock go, and
counts it a wake."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from runwright.store.postgres._store import PostgresStore
from runwright.store.postgres._watch import RELEASE_IF_HELD, Watch

from ..conftest import PG_BASE

NAMESPACE = 4242  # a key of this test's own (a real store's namespace is a crc32)


class RacedWaiter:
    """A waiter's session whose lock is granted as its lock_timeout fires, once; its later
    waits time out holding nothing."""

    def __init__(self) -> None:
        self.released: list[tuple[Any, ...]] = []

    async def execute(self, query: str, *args: Any) -> None:
        if query.startswith("SET"):
            return
        await asyncio.sleep(0.01)  # the lock_timeout
        raise asyncpg.LockNotAvailableError("canceling statement due to lock timeout")

    async def fetchval(self, query: str, *args: Any) -> Any:
        if query == RELEASE_IF_HELD:
            self.released.append(args)
            return True if len(self.released) == 1 else None
        return 2  # the next live mark: worker 2's

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return (2, None)

    def terminate(self) -> None:
        pass


async def test_a_lock_granted_as_the_waiters_timeout_fires_is_let_go_and_wakes_the_rescuer() -> None:
    session = RacedWaiter()

    async def connect() -> Any:
        return session

    watch = Watch(connect, NAMESPACE, ())
    watch.start(1)
    try:
        assert await watch.wait(5) is True
        assert watch.wakes == 1 and session.released[0] == (NAMESPACE, 2)
        assert await watch.wait(0.2) is False, "a timeout that held nothing is no wake"
        assert len(session.released) > 1
    finally:
        await watch.close()


@pytest.mark.parametrize("backend", ["postgres"])  # the shared store fixture, on PostgreSQL alone
async def test_release_if_held_lets_go_of_this_sessions_lock_only(store: PostgresStore) -> None:
    waiter = await asyncpg.connect(PG_BASE)
    holder = await asyncpg.connect(PG_BASE)
    notices: list[str] = []
    waiter.add_log_listener(lambda _conn, message: notices.append(str(message)))
    try:
        await waiter.execute("SELECT pg_advisory_lock($1, $2)", NAMESPACE, 7)  # kept after a timeout
        assert await waiter.fetchval(RELEASE_IF_HELD, NAMESPACE, 7) is True
        assert await holder.fetchval("SELECT pg_try_advisory_lock($1, $2)", NAMESPACE, 7), "let go"
        # Another session's: left to it, and no warning of a lock not held.
        assert await waiter.fetchval(RELEASE_IF_HELD, NAMESPACE, 7) is None
        assert not await waiter.fetchval("SELECT pg_try_advisory_lock($1, $2)", NAMESPACE, 7)
        assert notices == []
    finally:
        await waiter.close()
        await holder.close()
