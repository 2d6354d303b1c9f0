"""Checking the filter of a run listing before it reaches a store.

Each store would answer a bad filter its own way (PostgreSQL refuses `LIMIT -1` with a
driver error, SQLite reads it as "no limit", a string where an id goes reaches the driver):
the one answer is an InvalidInput that names the filter, from the library, the CLI and
HTTP alike.
"""

from __future__ import annotations

from typing import Any, Sequence

from .errors import InvalidInput
from .runs import RunState
from .serde import finite
from .store.params import RunListParams, ThreadCursor, ThreadListParams

__all__ = ["MAX_LIMIT", "checked_listing", "checked_thread_listing"]

MAX_LIMIT = 2**31 - 1  # an INTEGER in the stores: beyond it there is nothing more to return
MAX_ID = 2**63 - 1  # ids are 64-bit in every store


def checked_listing(params: RunListParams) -> RunListParams:
    """`params`, once every filter is of a kind and range the stores take."""
    _check_int(params.limit, "limit", 1, MAX_LIMIT)
    if params.before_id is not None:
        _check_int(params.before_id, "before_id", 1, MAX_ID)
    _check_states(params.states)
    for name in ("task", "queue", "thread", "key"):
        value = getattr(params, name)
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{name} must be a string, got {value!r}")
    if params.incarnation is not None:
        if params.thread is None:
            raise InvalidInput("incarnation names one thread's identity: give the thread too")
        _check_int(params.incarnation, "incarnation", 1, MAX_ID)
    for name in ("created_after", "created_before"):
        if getattr(params, name) is not None:
            finite(getattr(params, name), name)
    return params


def checked_thread_listing(params: ThreadListParams) -> ThreadListParams:
    """`params`, once the limit and the cursor are of a kind and range the stores take."""
    _check_int(params.limit, "limit", 1, MAX_LIMIT)
    after = params.after
    if after is not None:
        if not isinstance(after, ThreadCursor):
            raise InvalidInput(f"after must be a ThreadCursor (a listed thread's .cursor), got {after!r}")
        finite(after.created_at, "the cursor's created_at")
        if not isinstance(after.thread, str) or not (after.tenant is None or isinstance(after.tenant, str)):
            raise InvalidInput(f"the cursor names a thread by strings, got {after!r}")
    return params


def _check_int(value: Any, name: str, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer in {low}..{high}, got {value!r}")


def _check_states(states: Sequence[Any]) -> None:
    for state in states:
        if not isinstance(state, RunState):
            known = ", ".join(s.value for s in RunState)
            raise InvalidInput(f"states must be RunState values ({known}), got {state!r}")
