"""The retry helpers never swallow a cancellation that surfaced as a store error."""

from __future__ import annotations

import asyncio

import pytest

from runwright.errors import StoreUnreachable
from runwright.resilience import store_call, through_blinks


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
