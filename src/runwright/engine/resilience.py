"""How the engine lives with a store that blinks, and a fleet that must not beat in step."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Awaitable, Callable

from ..errors import StoreError
from ..logs import event

__all__ = ["jittered", "store_call"]


def jittered(seconds: float, spread: float = 0.2) -> float:
    """Every poll, heartbeat and renewal is jittered so that a fleet does not beat in step."""
    return seconds * random.uniform(1 - spread, 1 + spread)


async def store_call(fn: Callable[..., Awaitable[Any]], *args: Any, worker: int = 0) -> Any:
    """Call the store; on a store error log, back off and return None (callers retry on
    their next tick: a blink must not fail runs). Anything else propagates, and the
    worker's supervisor stops the worker."""
    try:
        return await fn(*args)
    except StoreError as exc:
        event(logging.WARNING, "store unavailable; will retry", worker=worker,
              operation=getattr(fn, "__name__", "?"), error=str(exc))
        await asyncio.sleep(jittered(0.5))
        return None
