"""A PostgreSQL rescuer is woken the moment a mark it watches drops (store/postgres/watch.py):
its ring's next worker's, and, when that one is of another machine, the next worker's of
its own machine. A worker of its own machine it judges by its pid, at once; one of another
machine only after the grace. So a worker with a sibling is watched by a sibling, and a
real death is taken over at once wherever the ring put its watcher; a worker alone on its
machine opens no second waiter.

Its waiter waits for the watched worker's lock with a lock_timeout, and PostgreSQL may
grant the lock just as that timeout fires: it raises the timeout and keeps the grant
(LockErrorCleanup), and a session lock outlives the error. A waiter that kept it made the
dead worker look alive for as long as its session lived (its run taken over only when its
lease expired, 30 s later; its row never removed): the waiter lets such a lock go, and
counts it a wake."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import asyncpg
import pytest

from runwright.store._liveness import this_machine
from runwright.store._params import RunRescueParams, WorkerRegisterParams, WorkerWatchParams
from runwright.store.postgres._store import PostgresStore
from runwright.store.postgres._watch import NEXT_MARKS, RELEASE_IF_HELD, RETARGET_S, Watch

from ..conftest import PG_BASE
from ..pid_namespace import absent_pid
from ..process.harness import wait_until

WOKEN_WITHIN_S = 5.0  # far past a wake (ms), far short of the watch's 60 s timeout
NAMESPACE = 4242  # a key of this test's own (a real store's namespace is a crc32)


async def _register(store: PostgresStore, host: str, pid: int) -> int:
    return await store.worker_register(WorkerRegisterParams(
        host=host, pid=pid, queues=["default"], tasks=["t"], version="v"))


async def _waited_on(admin: asyncpg.Connection, store: PostgresStore) -> list[int]:
    """The workers whose mark some session waits for (a waiter of a watch)."""
    return sorted(await admin.fetchval(
        "SELECT coalesce(array_agg(objid::bigint), '{}') FROM pg_locks WHERE locktype = 'advisory'"
        " AND classid = $1::oid AND objsubid = 2 AND NOT granted", store.lock_namespace))


async def _until_waited_on(admin: asyncpg.Connection, store: PostgresStore, wanted: list[int]) -> None:
    deadline = time.monotonic() + 10 * RETARGET_S
    while (seen := await _waited_on(admin, store)) != wanted:
        assert time.monotonic() < deadline, f"waiters on {seen}, not on {wanted}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("backend", ["postgres"])  # the shared store fixture, on PostgreSQL alone
async def test_a_sibling_the_ring_gave_to_another_machine_wakes_its_sibling_which_judges_it_at_once(
        store: PostgresStore, store_url: str) -> None:
    assert isinstance(store, PostgresStore)
    here = this_machine()
    # By id, a ring: watcher -> elsewhere -> sibling -> watcher. The sibling's ring watcher
    # is of another machine; the watcher is of the sibling's.
    watcher = await _register(store, here, os.getpid())
    elsewhere = await _register(store, "another-machine", 1)
    other_process = PostgresStore(store_url, PG_BASE, store.schema)  # the sibling's process
    await other_process.open(create=False)
    sibling = await _register(other_process, here, absent_pid())
    admin = await asyncpg.connect(PG_BASE)
    try:
        watching = asyncio.create_task(store.worker_watch(WorkerWatchParams(watcher, 60)))
        await _until_waited_on(admin, store, sorted([elsewhere, sibling]))
        await other_process.close()  # its sessions end, its row stays: as when it is SIGKILLed
        assert await asyncio.wait_for(watching, WOKEN_WITHIN_S) is True
        # Judged at its first look, so by its pid: one whose grace is due needs a second look.
        await store.run_rescue_many(RunRescueParams())
        assert sibling not in {w.id for w in await store.worker_list()}
    finally:
        await admin.close()
        await other_process.close()


@pytest.mark.parametrize("backend", ["postgres"])
async def test_no_second_waiter_where_the_ring_watches_the_sibling_or_there_is_none(
        store: PostgresStore) -> None:
    assert isinstance(store, PostgresStore)
    # The ring's next of `first` is its sibling; `alone` has none (its ring's next: `first`).
    first = await _register(store, "machine-a", 1)
    second = await _register(store, "machine-a", 2)
    alone = await _register(store, "machine-b", 3)
    admin = await asyncpg.connect(PG_BASE)
    try:
        waited_on: list[int] = []
        for watcher, ring_next in ((first, second), (alone, first)):
            watching = asyncio.create_task(store.worker_watch(WorkerWatchParams(watcher, 2.5 * RETARGET_S)))
            waited_on = sorted([*waited_on, ring_next])  # the watch before goes on
            await _until_waited_on(admin, store, waited_on)
            # Past a retarget, never a second waiter (a look between two waits sees fewer).
            deadline = time.monotonic() + 1.5 * RETARGET_S
            while time.monotonic() < deadline:
                assert Counter(await _waited_on(admin, store)) <= Counter(waited_on)
                await asyncio.sleep(0.02)
            assert await watching is False
    finally:
        await admin.close()


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


@asynccontextmanager
async def watching(*sessions: Any) -> AsyncIterator[Watch]:
    """A started Watch of worker 1 whose sessions are `sessions`, in turn (the last one for
    every later connect); closed on leaving."""
    given = iter(sessions)

    async def connect() -> Any:
        return next(given, sessions[-1])

    watch = Watch(connect, NAMESPACE, (), NEXT_MARKS)
    watch.start(1)
    try:
        yield watch
    finally:
        await watch.close()


async def test_a_lock_granted_as_the_waiters_timeout_fires_is_let_go_and_wakes_the_rescuer() -> None:
    session = RacedWaiter()
    async with watching(session) as watch:
        assert await watch.wait(5) is True
        assert watch.wakes == 1 and session.released[0] == (NAMESPACE, 2)
        assert await watch.wait(0.2) is False, "a timeout that held nothing is no wake"
        assert len(session.released) > 1


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


class Waiter:
    """A waiter's session that chooses `targets` (the ring's, the sibling's) and waits on
    whichever it is given until the test ends; `waited` says on which."""

    def __init__(self, targets: tuple[int | None, int | None]) -> None:
        self.targets = targets
        self.waited: list[int] = []
        self.ended = False

    async def execute(self, query: str, *args: Any) -> None:
        if not query.startswith("SET"):
            self.waited.append(args[1])
            await asyncio.Event().wait()  # held all along

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return self.targets

    def terminate(self) -> None:
        self.ended = True


async def test_the_siblings_waiter_waits_unless_the_rings_waits_for_that_mark_already() -> None:
    # The ring's waiter waits for 3; meanwhile the next of the ring became 2, the sibling.
    # Until the ring's waiter moves, only the sibling's waits for 2.
    ring, sibling = Waiter((3, 2)), Waiter((2, 2))
    async with watching(ring, sibling):
        await wait_until(lambda: ring.waited == [3] and sibling.waited == [2], "each waits for its mark")
    # Where the ring's waiter waits for the sibling, the sibling's has none: its session goes.
    ring, sibling = Waiter((2, 2)), Waiter((2, 2))
    async with watching(ring, sibling) as watch:
        await wait_until(lambda: ring.waited == [2], "the ring's waits for 2")
        watch._start_sibling(1)  # as if started while the ring's waited for another
        await wait_until(lambda: sibling.ended, "the sibling's session ends")
        assert sibling.waited == []


class Moving:
    """A waiter's session whose watched mark is gone when it chooses again: worker 2's, then
    worker 3's (its lock_timeout fired with nothing granted: 2 dropped between two waits)."""

    def __init__(self) -> None:
        self.targets = iter([(2, None), (3, None)])
        self.waited: list[int] = []

    async def execute(self, query: str, *args: Any) -> None:
        if query.startswith("SET"):
            return
        self.waited.append(args[1])
        if len(self.waited) == 1:
            await asyncio.sleep(0.01)
            raise asyncpg.LockNotAvailableError("canceling statement due to lock timeout")
        await asyncio.Event().wait()

    async def fetchval(self, query: str, *args: Any) -> Any:
        return None  # RELEASE_IF_HELD: nothing held

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return next(self.targets)

    def terminate(self) -> None:
        pass


async def test_a_mark_gone_between_two_waits_wakes_the_rescuer() -> None:
    session = Moving()
    async with watching(session) as watch:
        assert await watch.wait(5) is True
        assert session.waited[0] == 2 and watch.wakes == 0  # a look, not a release seen
        await wait_until(lambda: session.waited == [2, 3], "it waits for 3 next")
