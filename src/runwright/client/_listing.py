"""Checking the filter of a run listing before it reaches a store.

Each store would answer a bad filter its own way (PostgreSQL refuses `LIMIT -1` with a
driver error, SQLite reads it as "no limit", a string where an id goes reaches the driver):
the one answer is an InvalidInput that names the filter, from the library, the CLI and
HTTP alike.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..core import _inputs as inputs
from ..core._inputs import MAX_ID, MAX_LIMIT
from ..errors import InvalidInput
from ..runs import RunState, WaitReason
from ..store._params import RunListParams, ThreadCursor, ThreadListParams
from ..tasks._serde import finite

__all__ = ["MAX_LIMIT", "MAX_SEARCH_CHARS", "checked_listing", "checked_thread_listing", "checked_waiting"]

# The longest text an error search takes: a search is a scan of the runs' errors, so it
# is kept short (a phrase of the message, an exception's name).
MAX_SEARCH_CHARS = 200

# Each text filter and what it names (`inputs` knows what each may be).
TEXT_FILTERS = (("task", inputs.name), ("queue", inputs.queue), ("thread", inputs.thread_name),
                ("key", inputs.key), ("tenant", inputs.tenant))


def checked_listing(params: RunListParams) -> RunListParams:
    """`params`, once every filter is of a kind and range the stores take."""
    _check_int(params.limit, "limit", 1, MAX_LIMIT)
    if params.before_id is not None:
        _check_int(params.before_id, "before_id", 1, MAX_ID)
    _check_states(params.states)
    for name, check in TEXT_FILTERS:
        value = getattr(params, name)
        if value is not None:
            check(value, name)
    if params.incarnation is not None:
        if params.thread is None:
            raise InvalidInput("incarnation names one thread's identity: give the thread too")
        _check_int(params.incarnation, "incarnation", 1, MAX_ID)
    for name in ("created_after", "created_before"):
        if getattr(params, name) is not None:
            finite(getattr(params, name), name)
    if params.error is not None:
        inputs.name(params.error, "error", MAX_SEARCH_CHARS)
    return params


def checked_waiting(waiting: WaitReason | str | None) -> WaitReason | None:
    """A `waiting` filter as a WaitReason (its value as a string is taken too)."""
    if waiting is None or isinstance(waiting, WaitReason):
        return waiting
    try:
        return WaitReason(waiting)
    except ValueError:
        known = ", ".join(reason.value for reason in WaitReason)
        raise InvalidInput(f"waiting must be one of {known}; got {waiting!r}") from None


def checked_thread_listing(params: ThreadListParams) -> ThreadListParams:
    """`params`, once the limit and the cursor are of a kind and range the stores take."""
    _check_int(params.limit, "limit", 1, MAX_LIMIT)
    if params.tenant is not None:
        inputs.tenant(params.tenant)
    after = params.after
    if after is not None:
        if not isinstance(after, ThreadCursor):
            raise InvalidInput(f"after must be a ThreadCursor (a listed thread's .cursor), got {after!r}")
        finite(after.created_at, "the cursor's created_at")
        try:  # what a listed thread's cursor holds: its thread's name and tenant
            inputs.thread_name(after.thread, "the cursor's thread")
            if after.tenant is not None:
                inputs.tenant(after.tenant, "the cursor's tenant")
        except InvalidInput:
            raise InvalidInput("after: not the cursor of a listed thread (pass a listed thread's "
                               ".cursor)") from None
    return params


def _check_int(value: Any, name: str, low: int, high: int) -> None:
    inputs.integer(value, name, low, high)


def _check_states(states: Sequence[Any]) -> None:
    for state in states:
        if not isinstance(state, RunState):
            known = ", ".join(s.value for s in RunState)
            raise InvalidInput(f"states must be RunState values ({known}), got {state!r}")
