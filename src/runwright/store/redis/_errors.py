"""Which Redis failures are an outage, in one place for the store, its listener and the
fleet's bus.

An outage is what the loops wait out and retry (the store raises StoreUnreachable): the
connection is gone or timed out, or the server answers but cannot serve for now: a script
running past its time limit (BUSY; any client's long script makes every other client's
command fail so, until it ends or is killed), a server still loading its data (LOADING), a
replica cut off from its primary (MASTERDOWN), a former primary demoted by a failover
(READONLY), a cluster slot moving (TRYAGAIN, CLUSTERDOWN). Any other error is the
request's own fault and is not retried.
"""

from __future__ import annotations

import asyncio

from redis import exceptions as redis_errors

from ...errors import StoreError, StoreUnreachable

__all__ = ["FAILURES", "is_down", "store_error"]

# Everything a Redis call may raise: redis-py's errors and the socket's. The built-in
# ConnectionError and TimeoutError are OSErrors.
FAILURES = (redis_errors.RedisError, OSError)

_DOWN = (redis_errors.ConnectionError, redis_errors.TimeoutError, redis_errors.BusyLoadingError,
         redis_errors.ReadOnlyError, redis_errors.MasterDownError, redis_errors.TryAgainError,
         redis_errors.ClusterDownError, OSError)
# Error replies redis-py has no class for arrive as a ResponseError whose text starts
# with the reply's code.
_DOWN_REPLIES = ("BUSY ",)


def is_down(exc: BaseException) -> bool:
    """Whether `exc` says Redis cannot serve now (retry later), not that the call was wrong."""
    if isinstance(exc, _DOWN):
        return True
    return isinstance(exc, redis_errors.ResponseError) and str(exc).startswith(_DOWN_REPLIES)


def store_error(exc: BaseException) -> StoreError | asyncio.CancelledError:
    """The store's error for a Redis failure: StoreUnreachable for an outage (retried),
    StoreError for anything else; in a task being cancelled, the cancellation. redis-py
    turns a read cancelled mid-reply into a connection error, and every loop that waits
    out an outage would swallow it and never stop (seen: verify's session keeper, which
    its cleanup then awaited forever)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return asyncio.CancelledError()
    kind = StoreUnreachable if is_down(exc) else StoreError
    return kind(f"redis: {type(exc).__name__}: {exc}")
