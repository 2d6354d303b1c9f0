"""The retry helpers never swallow a cancellation that surfaced as a store error, and tell
a store failure (logged, waited out) from a bug of ours (fatal)."""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg
import pytest

from runwright.core._resilience import is_store_failure, store_call, through_blinks
from runwright.errors import StoreError, StoreUnreachable

from ..conftest import PG_BASE


async def _read_that_turns_a_cancel_into_an_outage() -> None:
    """As redis-py may do: a read cancelled mid-reply raises a connection error instead."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        raise StoreUnreachable("redis: ConnectionError: connection closed by the cancel") from None


@pytest.mark.parametrize("helper", [store_call, through_blinks])
async def test_a_cancel_seen_as_an_outage_still_cancels(helper) -> None:
    started = asyncio.Event()

    async def loop_forever() -> None:  # a worker's side task: call, retry, call again
        while True:
            started.set()
            await helper(_read_that_turns_a_cancel_into_an_outage)

    task = asyncio.create_task(loop_forever())
    await started.wait()
    await asyncio.sleep(0)  # into the read
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=30)
    assert task in done and task.cancelled()


async def test_a_loop_that_waits_out_redis_outages_itself_still_stops_when_cancelled() -> None:
    """Loops that catch StoreError themselves (verify's session keeper, the fleet's
    member) are safe only if the Redis store gives a task being cancelled its
    cancellation, not an outage: the keeper once ran on, and verify's cleanup awaited it
    forever."""
    import redis.exceptions

    from runwright.errors import StoreError
    from runwright.store import store_from_url

    store = store_from_url("redis://127.0.0.1:6379/0?namespace=rw_cancel_probe")  # not opened

    async def read() -> None:  # as redis-py may do: a cancelled read ends in a ConnectionError
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise redis.exceptions.ConnectionError("Connection closed by server.") from None

    started = asyncio.Event()
    outages: list[StoreError] = []

    async def keeper() -> None:
        while True:
            started.set()
            try:
                await store._call(read)  # type: ignore[attr-defined]
            except StoreError as exc:
                outages.append(exc)

    task = asyncio.create_task(keeper())
    await started.wait()
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=30)
    assert task in done and task.cancelled() and outages == []


# -- a store failure or a bug of ours: what the databases really raise ----------------


def _sqlite_error(statement: str) -> BaseException:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id integer PRIMARY KEY)")
    conn.execute("CREATE TRIGGER refuse BEFORE DELETE ON t BEGIN SELECT RAISE(ABORT, 'refused'); END")
    conn.execute("INSERT INTO t VALUES (1)")
    try:
        conn.execute(statement)
    except sqlite3.Error as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError(f"{statement!r} did not fail")


async def _postgres_error(statement: str) -> BaseException:
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.execute(statement)
    except asyncpg.PostgresError as exc:
        return exc
    finally:
        await conn.close()
    raise AssertionError(f"{statement!r} did not fail")


@pytest.mark.parametrize(("statement", "theirs"), [
    ("DELETE FROM t", True),  # a trigger refused: the database said no
    ("INSERT INTO t VALUES (1)", True),  # a constraint
    ("SELEKT 1", False),  # our statement is malformed
    ("SELECT nope FROM t", False),
])
def test_sqlite_refusals_are_the_stores_and_a_malformed_statement_is_ours(
        statement: str, theirs: bool) -> None:
    assert is_store_failure(_sqlite_error(statement)) is theirs


@pytest.mark.parametrize(("statement", "theirs"), [
    ("DO $$ BEGIN RAISE EXCEPTION 'refused'; END $$", True),
    ("CREATE TEMP TABLE t (id integer PRIMARY KEY); INSERT INTO t VALUES (1), (1)", True),  # the issue's
    ("SELEKT 1", False),
    ("SELECT nope FROM pg_class", False),
])
async def test_postgres_refusals_are_the_stores_and_a_malformed_statement_is_ours(
        statement: str, theirs: bool) -> None:
    assert is_store_failure(await _postgres_error(statement)) is theirs


@pytest.mark.parametrize("error", [TypeError("x"), KeyError("x"), AssertionError("x"), ValueError("x")])
def test_a_python_error_is_a_bug_of_ours(error: Exception) -> None:
    assert not is_store_failure(error)


def test_store_errors_connections_and_timeouts_are_the_stores() -> None:
    assert all(is_store_failure(e) for e in (StoreError("x"), StoreUnreachable("x"),
                                             ConnectionResetError(), TimeoutError()))


async def test_a_cancel_a_redis_call_swallowed_is_raised_once_it_returns() -> None:
    """redis-py's asyncio.wait_for (Python 3.11) may return a command's result and drop a
    cancel that came as the command ended: the store raises it after the call, or a
    worker's cancel of a run is lost and the run goes on (it cancels a run only once)."""
    from runwright.store import store_from_url

    store = store_from_url("redis://127.0.0.1:6379/0?namespace=rw_cancel_probe")  # not opened
    entered, done = asyncio.Event(), []

    async def send() -> str:  # as wait_for may do: the cancel is caught, the result returned
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass
        return "OK"

    async def caller() -> None:
        await store._call(send)  # type: ignore[attr-defined]
        done.append("went on")

    task = asyncio.create_task(caller())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == []
