"""Waiting with a time limit, without losing a cancellation.

Python 3.11's `asyncio.wait_for` returns the inner result when a cancellation lands in
the same loop turn as the inner future completes: the cancellation is swallowed. A
side task stopped that way (its event fired as the worker cancelled it) loops on, and
the worker's graceful stop waits for it forever. `asyncio.timeout` keeps the
cancellation, so every time-limited wait in runwright goes through here.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

__all__ = ["bounded", "wait_set"]

T = TypeVar("T")


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
