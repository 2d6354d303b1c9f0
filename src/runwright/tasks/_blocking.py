"""Blocking (plain, non-async) functions run in a thread, to their end.

A thread cannot be stopped from outside. `asyncio.to_thread` lets the awaiting coroutine
be cancelled while the thread runs on, so a cancelled run's slot would go to another run
while the first one's function still has side effects. Here a cancel waits for the
function to return, then is passed on: the slot is held until the thread is done. A
function that wants to stop early looks at `ctx.cancelled` (Context) between its steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import Any, Callable, TypeVar

__all__ = ["in_thread"]

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    future = loop.run_in_executor(None, call)
    cancelled = False
    while True:
        try:
            value = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():  # the thread itself ended by raising CancelledError
                raise
            cancelled = True  # wait for the thread; pass the cancel on after it
            continue
        except BaseException:
            if cancelled:
                raise asyncio.CancelledError() from None
            raise
        if cancelled:
            raise asyncio.CancelledError()
        return value
