"""Living with a store that blinks: retry a store call with backoff instead of failing
the run that made it (a write refused by the fence is no blink and is never retried),
and jitter, so that a fleet's polls do not beat in step."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable, TypeVar

from .errors import StoreError
from .logs import event

__all__ = ["BLINK_LIMIT_S", "jittered", "store_call", "through_blinks", "unless_cancelled"]

T = TypeVar("T")
# Past this, the outage is no blink: the error goes up. By then the run's lease has
# usually run out too, and another worker owns it.
BLINK_LIMIT_S = 60.0


def unless_cancelled(exc: StoreError) -> None:
    """Re-raise a cancellation that reached us as a store error: redis-py may turn a read
    cancelled mid-reply into a connection error, and a loop that took it for an outage
    and retried would never stop (seen as "side task did not stop")."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


def jittered(seconds: float, spread: float = 0.2) -> float:
    """Every poll, heartbeat and renewal is jittered so that a fleet does not beat in step."""
    return seconds * random.uniform(1 - spread, 1 + spread)


async def store_call(fn: Callable[..., Awaitable[Any]], *args: Any, worker: int = 0) -> Any:
    """For loops that tick anyway (claims, renewals, rescues): call the store once; on a
    store error log, back off and return None, and the loop tries again next tick.
    Anything else propagates, and the worker's supervisor stops the worker."""
    try:
        return await fn(*args)
    except StoreError as exc:
        unless_cancelled(exc)
        event(logging.WARNING, "store unavailable; will retry", worker=worker,
              operation=getattr(fn, "__name__", "?"), error=str(exc))
        await asyncio.sleep(jittered(0.5))
        return None


async def through_blinks(fn: Callable[..., Awaitable[T]], *args: Any, limit_s: float = BLINK_LIMIT_S) -> T:
    """`await fn(*args)`, retrying StoreError with jittered exponential backoff."""
    deadline = time.monotonic() + limit_s
    delay_s = 0.05
    while True:
        try:
            return await fn(*args)
        except StoreError as exc:
            unless_cancelled(exc)
            if time.monotonic() + delay_s > deadline:
                raise
            event(logging.WARNING, "store unavailable; retrying", error=str(exc),
                  operation=getattr(fn, "__name__", "?"), retry_in_s=round(delay_s, 2))
            await asyncio.sleep(jittered(delay_s))
            delay_s = min(2.0, delay_s * 2)
