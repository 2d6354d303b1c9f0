"""Transactional steps run by a worker: the write to the application's table lands once
however often the run is replayed; Redis refuses them at once, finally."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import time
from typing import Any, AsyncIterator

import asyncpg
import pytest

import runwright as rw
from runwright.runs import WaitReason
from runwright.store._params import (
    RunClaimParams,
    RunInsertParams,
    RunRescueParams,
    StepRecordParams,
    WorkerRegisterParams,
)

from ..app_tables import AppTable
from ..conftest import PG_BASE
from ..process.harness import wait_until
from .conftest import running_worker

# Each test names the backends it is about (the `backend` fixture's parameters): a
# transaction needs a SQL store; Redis refuses one, which tests of its own show.
ON_SQL = pytest.mark.parametrize("backend", ["sqlite", "postgres"])
ON_REDIS = pytest.mark.parametrize("backend", ["redis"])
ON_POSTGRES = pytest.mark.parametrize("backend", ["postgres"])


@ON_SQL
async def test_a_transactions_write_lands_once_across_a_replay_and_its_result_is_replayed(app, store_url):
    counters, calls = AppTable(store_url), []
    await counters.create()

    async def bump(tx, key: str) -> int:
        calls.append(key)
        return int(await tx.fetchval(counters.bump(), key))

    @app.task(retries=2, backoff=rw.Backoff(base_s=0.05))
    async def charge(ctx: rw.Context, order: str) -> int:
        seen = await ctx.transaction("bump", bump, order)
        if ctx.attempt == 1:
            raise ConnectionError("after the commit, before the run ended")
        return seen

    async with running_worker(app):
        handle = await app.submit(charge, order="order-1")
        assert await handle.result(timeout_s=30) == 1
    assert await counters.counts() == {"order-1": 1}
    assert calls == ["order-1"]  # the replay returned the journaled 1, without calling bump


@ON_SQL
async def test_a_transaction_block_replayed_runs_again_and_rolls_back(app, store_url):
    counters, entered = AppTable(store_url), []
    await counters.create()

    @app.task(retries=2, backoff=rw.Backoff(base_s=0.05))
    async def charge(ctx: rw.Context) -> str:
        async with ctx.transaction("bump") as tx:
            entered.append(ctx.attempt)
            await tx.execute(counters.bump(), "order-2")
        if ctx.attempt == 1:
            raise ConnectionError("after the commit")
        return "done"

    async with running_worker(app):
        assert await (await app.submit(charge)).result(timeout_s=30) == "done"
    assert entered == [1, 2]  # the block ran again on replay ...
    assert await counters.counts() == {"order-2": 1}  # ... and its write did not land twice


@ON_SQL
async def test_a_decorated_transaction_and_a_body_that_fails_writes_nothing(app, store_url):
    counters = AppTable(store_url)
    await counters.create()

    @rw.transactional
    async def record(tx, order: str, fail: bool) -> int:
        n = int(await tx.fetchval(counters.bump(), order))
        if fail:
            raise rw.FinalError("refused after writing")
        return n

    @app.task
    async def book(ctx: rw.Context, order: str, fail: bool = False) -> int:
        return await record(ctx, order, fail)

    async with running_worker(app):
        assert await (await app.submit(book, order="a")).result(timeout_s=30) == 1
        failed = await app.submit(book, order="b", fail=True)
        with pytest.raises(rw.RunFailed, match="refused after writing"):
            await failed.result(timeout_s=30)
    assert await counters.counts() == {"a": 1}
    assert [s.name for s in await app.steps((await app.list_runs(task="book"))[-1].id)] == ["record"]


@ON_SQL
async def test_another_durable_operation_inside_a_transaction_is_refused(app, store_url):

    @app.task
    async def nested(ctx: rw.Context) -> None:
        async with ctx.transaction("outer"):
            await ctx.step("inner", lambda: 1)

    async with running_worker(app):
        handle = await app.submit(nested)
        with pytest.raises(rw.RunFailed, match="'inner' inside a transaction"):
            await handle.result(timeout_s=30)


@ON_REDIS
async def test_redis_refuses_a_transactional_step_at_once_without_retry(app, store_url):

    @app.task(retries=3)
    async def charge(ctx: rw.Context) -> None:
        async with ctx.transaction("bump"):
            pass

    async with running_worker(app):
        handle = await app.submit(charge)
        with pytest.raises(rw.RunFailed, match="needs a SQL store") as info:
            await handle.result(timeout_s=30)
    assert info.value.state == "failed" and (await handle.refresh()).attempt == 1


@ON_REDIS
async def test_redis_refuses_a_step_in_your_transaction_before_its_body_runs(app, store_url):
    called = []

    async def record(tx: Any) -> None:
        called.append(tx)

    @app.task(retries=3)
    async def charge(ctx: rw.Context) -> None:
        await ctx.transaction("record", record, connection=object())

    async with running_worker(app):
        handle = await app.submit(charge)
        with pytest.raises(rw.RunFailed, match="needs a SQL store"):
            await handle.result(timeout_s=30)
    assert called == [] and (await handle.refresh()).attempt == 1


# -- submissions inside the application's transaction ---------------------------------


class AppConnection:
    """The application's own connection to the store's database, in a transaction it opens:
    asyncpg on PostgreSQL, sqlite3 on SQLite."""

    def __init__(self, store_url: str) -> None:
        self.url = store_url
        self.conn: Any = None

    async def __aenter__(self) -> AppConnection:
        if self.url.startswith("sqlite"):
            self.conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None)
        else:
            self.conn = await asyncpg.connect(PG_BASE)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.url.startswith("sqlite"):
            self.conn.close()
        else:
            await self.conn.close()

    async def begin(self) -> None:
        if self.url.startswith("sqlite"):
            self.conn.execute("BEGIN IMMEDIATE")
        else:
            self.transaction = self.conn.transaction()
            await self.transaction.start()

    async def end(self, commit: bool) -> None:
        if self.url.startswith("sqlite"):
            self.conn.execute("COMMIT" if commit else "ROLLBACK")
        elif commit:
            await self.transaction.commit()
        else:
            await self.transaction.rollback()


SUBMISSIONS = int(os.environ.get("RUNWRIGHT_TEST_TX_SUBMISSIONS", "1000"))


@ON_SQL
async def test_runs_submitted_in_transactions_exist_if_and_only_if_they_commit(app, store_url):
    """SUBMISSIONS transactions (1,000; RUNWRIGHT_TEST_TX_SUBMISSIONS sets another count), each
    submitting one run, a random half rolled back, while a worker drains: exactly the
    committed half exists and runs; no worker ever ran one of the others, and a follower
    asking for one is told it does not exist."""
    ran = []

    @app.task
    async def follow_up(ctx: rw.Context, order: int) -> int:
        ran.append(ctx.run_id)
        return order

    rng = random.Random(7)
    committed, rolled_back = [], []
    started = time.monotonic()
    async with running_worker(app, concurrency=8), AppConnection(store_url) as app_conn:
        for order in range(SUBMISSIONS):
            await app_conn.begin()
            handle = await app.submit(follow_up, order=order, key=f"order-{order}",
                                      connection=app_conn.conn)
            commit = rng.random() < 0.5
            await app_conn.end(commit)
            (committed if commit else rolled_back).append((handle.id, order))
        for run_id, order in committed:
            assert await (await app.get(run_id)).result(timeout_s=60) == order
    print(f"\n{app.store.url.split(':')[0]}: {SUBMISSIONS} transactions, {len(committed)} committed and "
          f"{len(rolled_back)} rolled back; the committed runs ran ({len(ran)} runs ran) in "
          f"{time.monotonic() - started:.2f} s")
    assert sorted(ran) == sorted(run_id for run_id, _ in committed)
    listed = {run.id for run in await app.list_runs(task="follow_up", limit=SUBMISSIONS)}
    assert listed == {run_id for run_id, _ in committed}
    for run_id, order in rolled_back:
        assert await app.list_runs(key=f"order-{order}") == []
        if store_url.startswith("postgresql"):
            # A sequence never gives an id twice. SQLite gives a rolled-back insert's id
            # to the next run (README: an id is the run's once its transaction commits).
            with pytest.raises(rw.RunNotFound):
                await app.get(run_id)
            with pytest.raises(rw.RunNotFound):
                await app.events_page(run_id)


@ON_SQL
async def test_a_key_given_twice_in_one_transaction_names_one_run(app, store_url):

    @app.task
    async def once(ctx: rw.Context, n: int) -> int:
        return n

    async with AppConnection(store_url) as app_conn:
        await app_conn.begin()
        first = await app.submit(once, n=1, key="k", connection=app_conn.conn)
        again = await app.submit(once, n=1, key="k", connection=app_conn.conn)
        with pytest.raises(rw.KeyConflict):
            await app.submit(once, n=2, key="k", connection=app_conn.conn)
        await app_conn.end(commit=True)
    assert (first.existed, again.existed, again.id) == (False, True, first.id)
    assert [run.id for run in await app.list_runs(task="once")] == [first.id]


@ON_SQL
async def test_a_submission_outside_a_transaction_or_to_a_thread_is_refused(app, store_url):

    @app.task
    async def once(ctx: rw.Context) -> None:
        return None

    async with AppConnection(store_url) as app_conn:
        with pytest.raises(rw.InvalidInput, match="is in none: begin one"):
            await app.submit(once, connection=app_conn.conn)
        await app_conn.begin()
        with pytest.raises(rw.InvalidInput, match="connection= and thread= cannot go together"):
            await app.submit(once, thread="t", connection=app_conn.conn)
        await app_conn.end(commit=False)
    with pytest.raises(rw.InvalidInput, match="takes a"):
        await app.submit(once, connection=object())
    assert await app.list_runs(task="once") == []


@ON_POSTGRES  # SQLAlchemy's async engine over asyncpg
async def test_a_sqlalchemy_session_submits_in_its_transaction(app, store_url):
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine


    @app.task
    async def ship(ctx: rw.Context, order: int) -> int:
        return order

    engine = create_async_engine(PG_BASE.replace("postgresql://", "postgresql+asyncpg://"))
    try:
        async with AsyncSession(engine) as session:
            async with session.begin():
                await session.execute(text("SELECT 1"))
                kept = await app.submit(ship, order=1, connection=session)
            async with session.begin():
                dropped = await app.submit(ship, order=2, connection=await session.connection())
                await session.rollback()
    finally:
        await engine.dispose()
    assert (await app.get(kept.id)).run.state is rw.RunState.QUEUED
    with pytest.raises(rw.RunNotFound):
        await app.get(dropped.id)


@ON_REDIS
async def test_redis_refuses_a_transactional_submission(app, store_url):

    @app.task
    async def once(ctx: rw.Context) -> None:
        return None

    with pytest.raises(rw.TransactionsUnsupported, match="needs a SQL store"):
        await app.submit(once, connection=object())


@ON_POSTGRES  # on SQLite, BEGIN IMMEDIATE lets one writer in at a time: no two are open at once
@pytest.mark.parametrize("first_commits", [True, False])
async def test_one_key_in_two_open_transactions_names_one_run(app, store_url, first_commits):
    """Two requests submit the same key, each in its own open transaction: the second
    waits for the first to end, then gets its run (it committed) or makes its own (it
    rolled back). Never two runs of one key, never a run of a rolled-back transaction."""

    @app.task
    async def once(ctx: rw.Context, n: int) -> int:
        return n

    async with AppConnection(store_url) as a, AppConnection(store_url) as b:
        await a.begin()
        await b.begin()
        first = await app.submit(once, n=1, key="k", connection=a.conn)
        second = asyncio.create_task(app.submit(once, n=1, key="k", connection=b.conn))
        await asyncio.sleep(0.2)
        assert not second.done()  # held by the first transaction's key
        await a.end(commit=first_commits)
        got = await asyncio.wait_for(second, 30)
        await b.end(commit=True)
    (run,) = await app.list_runs(task="once")
    if first_commits:
        assert (got.existed, got.id, run.id) == (True, first.id, first.id)
    else:
        assert (got.existed, run.id) == (False, got.id) and got.id != first.id


# -- your own transaction, in the driver you use --------------------------------------


class Caller:
    """The application's transaction on the store's database, in one of the drivers it may
    use: `transaction()` opens one and yields what the application would pass
    (`connection=`), committed at the block's end, or rolled back when it raises."""

    def __init__(self, driver: str, store_url: str) -> None:
        self.driver, self.url = driver, store_url
        self.path = store_url.removeprefix("sqlite:///")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        if self.driver in ("sqlite3", "asyncpg"):  # the URL's own driver: AppConnection's
            async with AppConnection(self.url) as app_conn:
                await app_conn.begin()
                try:
                    yield app_conn.conn
                except BaseException:
                    await app_conn.end(commit=False)
                    raise
                await app_conn.end(commit=True)
        elif self.driver == "psycopg":
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_BASE) as conn, conn.transaction():
                yield conn
        else:  # sqlalchemy-<driver>: a session over that driver; sqlalchemy-engine-<driver>: engine.begin()
            from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

            over = self.driver.rsplit("-", 1)[1]
            url = (f"sqlite+aiosqlite:///{self.path}" if over == "aiosqlite"
                   else PG_BASE.replace("postgresql://", f"postgresql+{over}://"))
            engine = create_async_engine(url)
            try:
                if "-engine-" in self.driver:
                    async with engine.begin() as conn:
                        yield conn
                else:
                    async with AsyncSession(engine) as session, session.begin():
                        yield session
            finally:
                await engine.dispose()

    async def execute(self, tx: Any, sql: str) -> None:
        """One statement of the application's, in `tx`."""
        if self.driver == "sqlite3":
            tx.execute(sql)
        elif self.driver.startswith("sqlalchemy"):
            from sqlalchemy import text

            await tx.execute(text(sql))
        else:
            await tx.execute(sql)


DRIVERS = {"sqlite": ["sqlite3", "sqlalchemy-aiosqlite", "sqlalchemy-engine-aiosqlite"],
           "postgres": ["asyncpg", "psycopg", "sqlalchemy-asyncpg", "sqlalchemy-psycopg",
                        "sqlalchemy-engine-asyncpg"]}


# Each backend with each of its drivers (the `backend` fixture's parameter, and `driver`).
IN_EACH_DRIVER = pytest.mark.parametrize("backend, driver", [
    (backend, driver) for backend, drivers in DRIVERS.items() for driver in drivers])


@pytest.fixture
def caller(driver: str, store_url: str) -> Caller:
    return Caller(driver, store_url)


@IN_EACH_DRIVER
async def test_a_step_in_your_own_transaction_lands_once_in_each_driver(app, store_url, caller):
    counters, calls = AppTable(store_url), []
    await counters.create()
    bump = (f"INSERT INTO {counters.name} (id, n) VALUES ('paid', 1) ON CONFLICT (id) DO UPDATE "
            f"SET n = {counters.name.split('.')[-1]}.n + 1")

    async def record(tx: Any) -> str:
        calls.append(1)
        await caller.execute(tx, bump)
        return caller.driver

    @app.task(retries=2, backoff=rw.Backoff(base_s=0.05))
    async def charge(ctx: rw.Context) -> str:
        async with caller.transaction() as tx:
            await caller.execute(tx, f"INSERT INTO {counters.name} (id, n) "
                                     f"VALUES ('attempt-{ctx.attempt}', 1)")
            said = await ctx.transaction("record", record, connection=tx)
        if ctx.attempt == 1:
            raise ConnectionError("after the commit")
        return said

    async with running_worker(app):
        assert await (await app.submit(charge)).result(timeout_s=30) == caller.driver
    assert await counters.counts() == {"paid": 1, "attempt-1": 1, "attempt-2": 1}
    assert calls == [1]  # the replay returned the journaled value, without calling record


@IN_EACH_DRIVER
async def test_a_submission_in_your_own_transaction_in_each_driver(app, caller):

    @app.task
    async def ship(ctx: rw.Context, order: int) -> int:
        return order

    async with caller.transaction() as tx:
        kept = await app.submit(ship, order=1, key="kept", connection=tx)
    with pytest.raises(ZeroDivisionError):
        async with caller.transaction() as tx:
            await app.submit(ship, order=2, key="dropped", connection=tx)
            raise ZeroDivisionError
    assert [run.id for run in await app.list_runs(task="ship")] == [kept.id]
    assert await app.list_runs(key="dropped") == []
    async with running_worker(app):
        assert await kept.result(timeout_s=30) == 1


@IN_EACH_DRIVER
async def test_an_idle_worker_learns_of_a_run_submitted_in_your_transaction_at_its_commit(app, caller):
    """An idle worker that looks at the queue by itself once an hour runs a run submitted
    in the application's transaction: the commit wakes it (PostgreSQL's NOTIFY, sent with
    the insert, goes out at the commit; SQLite's workers see the file change then)."""

    @app.task
    async def ship(ctx: rw.Context, order: int) -> int:
        return order

    async with running_worker(app, poll_s=3600):
        await asyncio.sleep(0.3)  # idle: its first look at the queue is behind it
        async with caller.transaction() as tx:
            handle = await app.submit(ship, order=7, connection=tx)
            await asyncio.sleep(0.5)  # the run is not there to be seen until the commit
        assert await handle.result(timeout_s=30) == 7


@ON_SQL
async def test_a_superseded_claims_step_in_your_transaction_is_refused_and_rolls_it_back(app, store_url):
    """A zombie's entry, written in the caller's transaction, is refused (LeaseLost): the
    caller's block rolls back with it, so its writes never land."""
    counters = AppTable(store_url)
    await counters.create()
    (run,) = await app.store.run_insert_many([RunInsertParams(key="z", task="t", args="{}")])
    wid = await app.store.worker_register(WorkerRegisterParams(host="h", pid=1, queues=["default"],
                                                               tasks=["t"]))
    (first,) = await app.store.run_claim(RunClaimParams(wid, ["default"], ["t"], 1, 0.5))
    await asyncio.sleep(0.6)  # the lease lapses; the rescuer gives the run back; another claims it
    await app.store.run_rescue_many(RunRescueParams())
    (second,) = await app.store.run_claim(RunClaimParams(wid, ["default"], ["t"], 1, 30))
    assert second.fence > first.fence
    caller = Caller("sqlite3" if store_url.startswith("sqlite") else "asyncpg", store_url)
    with pytest.raises(rw.LeaseLost):
        async with caller.transaction() as tx:
            await caller.execute(tx, f"INSERT INTO {counters.name} (id, n) VALUES ('zombie', 1)")
            stale = StepRecordParams(run.id, first.fence, 0, "charge", "done", "1")
            await app.store.step_record_in(tx, stale)
    assert await counters.counts() == {}
    assert await app.store.step_list(run.id) == []


@ON_SQL
async def test_a_batch_submitted_in_a_transaction_exists_whole_or_not_at_all(app, store_url):

    @app.task
    async def line(ctx: rw.Context, n: int) -> int:
        return n

    caller = Caller("sqlite3" if store_url.startswith("sqlite") else "asyncpg", store_url)
    async with caller.transaction() as tx:
        kept = await app.submit_many(line, [{"n": n} for n in range(50)], connection=tx)
    with pytest.raises(ZeroDivisionError):
        async with caller.transaction() as tx:
            await app.submit_many(line, [{"n": n} for n in range(50, 100)], connection=tx)
            raise ZeroDivisionError
    listed = await app.list_runs(task="line", limit=500)
    assert sorted(run.id for run in listed) == sorted(handle.id for handle in kept)
    assert sorted(run.arguments()["n"] for run in listed) == list(range(50))


# -- signals and events inside the application's transaction ---------------------------


async def _parked(app: rw.App, run_id: int) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.state is rw.RunState.QUEUED and run.waiting == WaitReason.SIGNAL


@IN_EACH_DRIVER
async def test_a_signal_sent_in_your_own_transaction_is_kept_if_and_only_if_it_commits(app, caller):
    """A signal sent in a transaction that rolls back is never kept, so never taken; one
    sent in a transaction that commits wakes the parked run then. A key sent twice inside
    one transaction keeps one signal, and a run submitted in the transaction takes a
    signal sent to it there (judged inside the transaction, where the run exists)."""

    @app.task
    async def awaits(ctx: rw.Context, n: int) -> object:
        return await ctx.wait_signal("go")

    parked = await app.submit(awaits, n=0)
    async with running_worker(app):
        await wait_until(lambda: _parked(app, parked.id), "the run parks on its wait")
        with pytest.raises(ZeroDivisionError):
            async with caller.transaction() as tx:
                await app.signal(parked.id, "go", "dropped", connection=tx)
                raise ZeroDivisionError
        assert await app.signals(parked.id) == []
        assert await _parked(app, parked.id)
        async with caller.transaction() as tx:
            sent = await app.signal(parked.id, "go", "kept", key="once", connection=tx)
            again = await app.signal(parked.id, "go", "kept", key="once", connection=tx)
            fresh = await app.submit(awaits, n=1, connection=tx)
            await app.signal(fresh.id, "go", "with its run", connection=tx)
        assert again.seq == sent.seq
        assert await parked.result(timeout_s=30) == "kept"
        assert await fresh.result(timeout_s=30) == "with its run"
    assert [s.payload for s in await app.signals(parked.id)] == ["kept"]


@IN_EACH_DRIVER
async def test_an_event_published_in_your_own_transaction_delivers_and_starts_only_if_it_commits(app, caller):
    """A publish in a transaction that rolls back delivers nothing and starts nothing (its
    id is free again); in one that commits, the waiting run gets the event and the task
    declared on it is started, once for the id (published twice inside it)."""

    @app.task
    async def awaits_payment(ctx: rw.Context, order: int) -> object:
        return await ctx.wait_event("paid", match={"order": order})

    @app.task(on_event="paid")
    async def receipt(event: dict) -> int:
        return int(event["order"])

    waiting = await app.submit(awaits_payment, order=1)
    async with running_worker(app):
        await wait_until(lambda: _parked(app, waiting.id), "the run parks on its wait")
        with pytest.raises(ZeroDivisionError):
            async with caller.transaction() as tx:
                dropped = await app.publish_event("paid", {"order": 1}, id="pay-1", connection=tx)
                assert dropped.woken == [waiting.id] and len(dropped.started) == 1
                raise ZeroDivisionError
        assert await app.list_runs(task="receipt") == []
        assert await app.signals(waiting.id) == []
        assert await _parked(app, waiting.id)
        async with caller.transaction() as tx:
            kept = await app.publish_event("paid", {"order": 1}, id="pay-1", connection=tx)
            again = await app.publish_event("paid", {"order": 1}, id="pay-1", connection=tx)
        assert (kept.existed, kept.woken, len(kept.started)) == (False, [waiting.id], 1)
        assert (again.existed, again.started) == (True, [])
        assert await waiting.result(timeout_s=30) == {"order": 1}
        assert await (await app.get(kept.started[0])).result(timeout_s=30) == 1
    assert [run.id for run in await app.list_runs(task="receipt")] == kept.started


@ON_SQL
async def test_a_signal_or_publish_outside_a_transaction_or_on_another_kind_of_connection_is_refused(
        app, store_url):

    @app.task
    async def once(ctx: rw.Context) -> None:
        return None

    run = await app.submit(once)
    async with AppConnection(store_url) as app_conn:
        with pytest.raises(rw.InvalidInput, match="is in none: begin one"):
            await app.signal(run.id, "go", connection=app_conn.conn)
        with pytest.raises(rw.InvalidInput, match="is in none: begin one"):
            await app.publish_event("paid", {}, connection=app_conn.conn)
    with pytest.raises(rw.InvalidInput, match="takes a"):
        await app.signal(run.id, "go", connection=object())
    with pytest.raises(rw.InvalidInput, match="takes a"):
        await app.publish_event("paid", {}, connection=object())
    assert await app.signals(run.id) == []
    assert not (await app.publish_event("paid", {}, id="x")).existed  # nothing kept before


@ON_REDIS
async def test_redis_refuses_a_transactional_signal_or_publish(app, store_url):

    @app.task
    async def once(ctx: rw.Context) -> None:
        return None

    run = await app.submit(once)
    with pytest.raises(rw.TransactionsUnsupported, match="needs a SQL store"):
        await app.signal(run.id, "go", connection=object())
    with pytest.raises(rw.TransactionsUnsupported, match="needs a SQL store"):
        await app.publish_event("paid", {}, connection=object())
    assert await app.signals(run.id) == []
