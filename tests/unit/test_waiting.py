"""A time-limited wait keeps a cancellation that lands as its event fires: with
Python 3.11's `asyncio.wait_for` it was swallowed, the worker's cancel watcher looped on,
and a graceful stop waited for it forever."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from runwright.waiting import bounded, wait_set

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
    assert users == [], "use runwright.waiting: asyncio.wait_for loses cancellations on 3.11"
