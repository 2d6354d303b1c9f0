"""Stopping the store's background tasks for certain.

redis-py can turn a cancel that lands inside a read into a connection error; a loop that
retries connection errors then swallows the cancel and runs on, and whoever awaits it
waits forever. So a stop raises the owner's flag (the loop's condition) and cancels until
the task has really ended.
"""

from __future__ import annotations

import asyncio

__all__ = ["halt"]

CANCEL_EVERY_S = 0.1


async def halt(task: asyncio.Task[None]) -> None:
    """Cancel `task` again and again until it is done, then reap it. The caller has
    already set the flag that its loop checks, so a swallowed cancel ends it too."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=CANCEL_EVERY_S)
    await asyncio.gather(task, return_exceptions=True)
