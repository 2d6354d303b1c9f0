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
