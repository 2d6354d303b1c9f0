"""Waiting with a time limit, and stopping a task, without losing a cancellation.

Python 3.11's `asyncio.wait_for` returns the inner result when a cancellation lands in
the same loop turn as the inner future completes: the cancellation is swallowed. A
side task stopped that way (its event fired as the worker cancelled it) loops on, and
the worker's graceful stop waits for it forever. `asyncio.timeout` keeps the
cancellation, so every time-limited wait in runwright goes through here.

Libraries still lose cancellations: redis-py sends every command through `wait_for`
when a socket timeout is set, and can turn a cancel that lands inside a read into a
connection error, which a loop that rides out outages then retries. So a loop task is
stopped with `halt`, which cancels until the task has really ended.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, TypeVar

__all__ = ["bounded", "halt", "wait_set"]

T = TypeVar("T")

CANCEL_EVERY_S = 0.1


async def bounded(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`await awaitable`, raising TimeoutError past `timeout_s` (the inner is cancelled)."""
    async with asyncio.timeout(timeout_s):
        return await awaitable


async def wait_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until `event` is set (True) or `timeout_s` passes (False)."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def halt(*tasks: asyncio.Future[Any]) -> None:
    """Cancel every one of `tasks` at once, again and again until all are done, then reap
    them (their results or errors are dropped: the caller is stopping them)."""
    running = [task for task in tasks if not task.done()]
    while running:
        for task in running:
            task.cancel()
        await asyncio.wait(running, timeout=CANCEL_EVERY_S)
        running = [task for task in running if not task.done()]
    await asyncio.gather(*tasks, return_exceptions=True)
