"""Transactional steps: the application's writes to its own tables and the step's journal
entry, in one transaction of the store's database, committed together or not at all.

A step's effect in the application's database is then exactly-once: a worker that dies
before the commit leaves neither (the takeover runs the step again, once), one that dies
after leaves both (the takeover replays the entry and does not run it). A zombie owner,
its claim superseded, is refused at commit by the fence and its writes roll back.

Two forms. `await ctx.transaction(fn, *args)` calls `fn(tx, *args)` and journals what it
returns: a replay returns that, without calling it. `async with ctx.transaction() as tx:`
journals that the block committed; Python cannot skip a block, so a replay runs it again
in a transaction that is rolled back (its writes never land twice, and what it read is not
kept). Use the call form when later code depends on what the transaction read.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, AsyncContextManager, Awaitable, Callable, Protocol, TypeVar

from ..core._journal import StepRecord
from ..errors import TransactionsUnsupported
from ..runs import Run
from ..store._connections import driver_connection
from ..store._params import StepRecordParams, StepTransaction
from ..store._rules import NO_TRANSACTIONS
from ._crashpoints import crash_point
from ._runtime import Runtime

__all__ = ["IN_TRANSACTION", "TransactionBlock", "call_in_transaction", "transactional"]

T = TypeVar("T")


class Context(Protocol):
    """What a transactional step needs of the run's Context (`_context.Context`, which
    imports this module)."""

    runtime: Runtime
    run: Run

    async def _durable_position(self, name: str) -> tuple[int, StepRecord | None]: ...

    def _span(self, name: str, position: int) -> AbstractContextManager[Any]: ...

    def transaction(self, name: str, fn: Callable[..., Awaitable[T]], /, *args: Any, connection: Any = None,
                    **kwargs: Any) -> Awaitable[T]: ...

# Set while a transaction's body runs: another durable operation of the run inside it
# would be journaled outside the transaction (and a nested one on another connection).
IN_TRANSACTION: ContextVar[bool] = ContextVar("runwright_in_transaction", default=False)


def _record(ctx: Context, position: int, name: str, result: str | None) -> StepRecordParams:
    return StepRecordParams(ctx.run.id, ctx.run.fence, position, name, "done", result)


async def call_in_transaction(ctx: Context, name: str, fn: Callable[..., Awaitable[Any]],
                              args: tuple[Any, ...], kwargs: dict[str, Any], connection: Any = None) -> Any:
    """`fn(tx, *args, **kwargs)` once for the run, in a transaction that commits its journal
    entry (what it returned) with its writes: the store's own, or with `connection` the
    caller's open one (`tx` is then that connection, as given)."""
    position, record = await ctx._durable_position(name)
    if record is not None:
        return record.value()
    if connection is not None:
        if not ctx.runtime.store.keeps_transactions:  # refused before `fn` writes in the caller's
            raise TransactionsUnsupported(NO_TRANSACTIONS)
        return await _in_callers_transaction(ctx, name, position, fn, args, kwargs, connection)
    with ctx._span(name, position):
        async with ctx.runtime.store.step_transaction() as held:
            marker = IN_TRANSACTION.set(True)
            try:
                value = await fn(held.connection, *args, **kwargs)
            finally:
                IN_TRANSACTION.reset(marker)
            result = await ctx.runtime.limits.stored(value, f"result of transaction {name!r}")
            crash_point("transaction.before_commit", name)
            held.record = _record(ctx, position, name, result)
    crash_point("step.after_journal", name)
    return value


async def _in_callers_transaction(ctx: Context, name: str, position: int, fn: Callable[..., Awaitable[Any]],
                                  args: tuple[Any, ...], kwargs: dict[str, Any], connection: Any) -> Any:
    """The caller's transaction: `fn` writes through it, then the entry is written in it
    too, fenced; the caller's commit commits both (its rollback, neither)."""
    driver = await driver_connection(connection)
    with ctx._span(name, position):
        marker = IN_TRANSACTION.set(True)
        try:
            value = await fn(connection, *args, **kwargs)
        finally:
            IN_TRANSACTION.reset(marker)
        result = await ctx.runtime.limits.stored(value, f"result of transaction {name!r}")
        crash_point("transaction.before_commit", name)
        await ctx.runtime.store.step_record_in(driver, _record(ctx, position, name, result))
    return value


class TransactionBlock:
    """`async with ctx.transaction() as tx:` (see the module docstring)."""

    def __init__(self, ctx: Context, name: str) -> None:
        self._ctx, self._name = ctx, name
        self._position = -1
        self._replayed = False
        self._opened: AsyncContextManager[StepTransaction] | None = None
        self._held: StepTransaction | None = None
        self._marker: Any = None

    async def __aenter__(self) -> Any:
        self._position, record = await self._ctx._durable_position(self._name)
        self._replayed = record is not None
        self._opened = self._ctx.runtime.store.step_transaction()
        self._held = await self._opened.__aenter__()
        self._marker = IN_TRANSACTION.set(True)
        return self._held.connection

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> bool | None:
        assert self._opened is not None and self._held is not None
        IN_TRANSACTION.reset(self._marker)
        if kind is None and not self._replayed:
            crash_point("transaction.before_commit", self._name)
            self._held.record = _record(self._ctx, self._position, self._name, None)
        await self._opened.__aexit__(kind, error, traceback)
        if kind is None and not self._replayed:
            crash_point("step.after_journal", self._name)
        return None


def transactional(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """`@rw.transactional` on `async def record_charge(tx, order_id)`: in a task,
    `await record_charge(ctx, order_id)` runs it as `ctx.transaction(<its name>,
    record_charge, order_id)`, a transactional step named after the function."""
    name = fn.__name__

    @functools.wraps(fn)
    async def step(ctx: Context, *args: Any, **kwargs: Any) -> T:
        value: T = await ctx.transaction(name, fn, *args, **kwargs)
        return value

    return step
