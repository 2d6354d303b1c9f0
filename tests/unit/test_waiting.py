"""A time-limited wait keeps a cancellation that lands as its event fires: with
Python 3.11's `asyncio.wait_for` it was swallowed, the worker's cancel watcher looped on,
and a graceful stop waited for it forever."""

from __future__ import annotations

import asyncio
import pathlib
import sys

import pytest

from runwright.core._waiting import bounded, halt, wait_set

SRC = pathlib.Path(__file__).parents[2] / "src" / "runwright"


async def _cancelled_as_it_fires(wait) -> asyncio.Task:  # type: ignore[no-untyped-def]
    event = asyncio.Event()
    task = asyncio.create_task(wait(event))
    for _ in range(3):
        await asyncio.sleep(0)  # the task is parked on the event
    event.set()
    task.cancel()  # the same loop turn as the wake-up
    await asyncio.gather(task, return_exceptions=True)
    return task


async def test_wait_set_keeps_a_cancellation_that_lands_as_its_event_fires() -> None:
    task = await _cancelled_as_it_fires(lambda event: wait_set(event, 10))
    assert task.cancelled()


async def test_bounded_keeps_a_cancellation_that_lands_as_its_inner_completes() -> None:
    task = await _cancelled_as_it_fires(lambda event: bounded(event.wait(), 10))
    assert task.cancelled()


async def test_wait_set_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    event.set()
    assert await wait_set(event, 0.01) is True
    with pytest.raises(TimeoutError):
        await bounded(asyncio.Event().wait(), 0.01)


def test_no_module_waits_through_asyncio_wait_for() -> None:
    users = [str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
             if "asyncio.wait_for(" in path.read_text()]
    assert users == [], "use runwright.core._waiting: asyncio.wait_for loses cancellations on 3.11"


async def test_halt_stops_a_loop_that_lost_its_first_cancellation() -> None:
    """redis-py sends each command through `asyncio.wait_for` (a socket timeout is set):
    a cancel that lands as a send completes is lost, and a renewal loop (verify's session
    keeper) looped on while its stopper awaited it forever. `halt` cancels again."""
    inner: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    turns = 0

    async def renewing() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.wait_for(inner, 10)  # what the library does: the race is inside it
            await asyncio.sleep(0.01)

    task = asyncio.create_task(renewing())
    for _ in range(3):
        await asyncio.sleep(0)  # parked in wait_for
    inner.set_result(None)
    task.cancel()  # the same loop turn as the send's completion
    await asyncio.wait([task], timeout=0.2)
    if sys.version_info < (3, 12):
        assert not task.done() and turns > 1, "3.11's wait_for swallowed the cancellation"
    await asyncio.wait_for(halt(task), 5)
    assert task.cancelled()
