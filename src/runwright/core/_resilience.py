"""Living with a store that blinks: retry a store call with backoff instead of failing
the run that made it (a write refused by the fence is no blink and is never retried),
and jitter, so that a fleet's polls do not beat in step."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable, TypeVar

from ..errors import StoreError
from ..observe._logs import event

__all__ = [
    "BLINK_LIMIT_S", "is_store_failure", "jittered", "store_call", "through_blinks", "unless_cancelled",
]

T = TypeVar("T")
# Past this, the outage is no blink: the error goes up. By then the run's lease has
# usually run out too, and another worker owns it.
BLINK_LIMIT_S = 60.0


def unless_cancelled(exc: StoreError) -> None:
    """Re-raise a cancellation that reached us as a store error: redis-py may turn a read
    cancelled mid-reply into a connection error, and a loop that took it for an outage
    and retried would never stop (seen as "side task did not stop")."""
    _unless_cancelled(exc)


def _unless_cancelled(exc: BaseException) -> None:
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


def jittered(seconds: float, spread: float = 0.2) -> float:
    """Every poll, heartbeat and renewal is jittered so that a fleet does not beat in step."""
    return seconds * random.uniform(1 - spread, 1 + spread)


# The packages whose exceptions are the store's own: the database's drivers. What they
# raise is the database's answer (it refused, it is gone, it is full, a trigger or a
# constraint said no), however a store let it through.
_DRIVERS = frozenset({"asyncpg", "redis", "sqlite3", "_sqlite3"})
# The answers that say our own statement is wrong rather than the database: PostgreSQL's
# class 42 (a syntax error, a column or function we named that does not exist) but 42501
# (a privilege an operator took away), and SQLite's SQLITE_ERROR (1: "no such column",
# a syntax error).
_PG_OUR_STATEMENT, _PG_PRIVILEGE = "42", "42501"
_SQLITE_ERROR = 1


def is_store_failure(exc: BaseException) -> bool:
    """Whether `exc` is the store failing (a side task logs it, backs off and goes on)
    rather than a bug in our own code (fatal, loudly): a StoreError; a connection or a
    timeout; or an error the database's driver raised, unless it says the statement we
    sent is malformed. A Python error of ours (TypeError, KeyError, AssertionError ...)
    is never a store failure, wherever it was raised."""
    if isinstance(exc, (StoreError, OSError, TimeoutError)):
        return True
    if not any(cls.__module__.partition(".")[0] in _DRIVERS for cls in type(exc).__mro__):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith(_PG_OUR_STATEMENT) and sqlstate != _PG_PRIVILEGE:
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return not (isinstance(code, int) and code & 0xFF == _SQLITE_ERROR)  # extended codes: their low byte


async def store_call(fn: Callable[..., Awaitable[Any]], *args: Any, worker: int = 0) -> Any:
    """For loops that tick anyway (claims, renewals, rescues, sweeps): call the store once;
    on a store failure (`is_store_failure`) log, back off and return None, and the loop
    tries again next tick. Anything else (a bug of ours) propagates, and the worker's
    supervisor stops the worker, loudly."""
    try:
        return await fn(*args)
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        _unless_cancelled(exc)
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
