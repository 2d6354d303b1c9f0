"""The seam between the shared SQL and each database: placeholders, arrays, row locks,
and a connection both dialects answer the same way.

Shared statements are written with PostgreSQL's `$n` placeholders and three markers:
`IN_ARRAY($n)` (the column's value is one of an array parameter), `FOR_UPDATE` (lock
the rows read, where the database has row locks; `FOR_UPDATE_SKIP_LOCKED`: and pass over
rows another transaction holds) and `NOW($n)` (the time a lease, a due
time or a deadline is judged by: parameter `$n`, or when it is NULL the database's own
clock, see `runwright.core._clock`). Each dialect rewrites them once.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Protocol, Sequence

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SqlConnection"]

_IN_ARRAY = re.compile(r"IN_ARRAY\(\$(\d+)\)")
_PLACEHOLDER = re.compile(r"\$(\d+)")
_NOW = re.compile(r"NOW\(\$(\d+)\)")


class Dialect:
    def __init__(self, name: str, in_array: str, for_update: str, placeholder: str,
                 json_arrays: bool, now: str) -> None:
        self.name = name
        self._now = now
        self._in_array = in_array
        self._for_update = for_update
        self._placeholder = placeholder
        self._json_arrays = json_arrays

    @functools.lru_cache(maxsize=512)  # noqa: B019 - two dialects, a bounded set of statements
    def prepare(self, sql: str) -> str:
        """The shared statement in this dialect."""
        sql = _IN_ARRAY.sub(lambda m: self._in_array.format(n=m[1]), sql)
        sql = _NOW.sub(lambda m: self._now.format(n=m[1]), sql)
        skip_locked = f"{self._for_update} SKIP LOCKED" if self._for_update else ""
        sql = sql.replace("FOR_UPDATE_SKIP_LOCKED", skip_locked)
        sql = sql.replace("FOR_UPDATE", self._for_update)
        return _PLACEHOLDER.sub(lambda m: self._placeholder.format(n=m[1]), sql)

    def array(self, values: Sequence[Any]) -> Any:
        """An array parameter (SQLite takes it as JSON, read with json_each)."""
        return json.dumps(list(values)) if self._json_arrays else list(values)


# now(): one instant per transaction, as one `now` per operation is in Python.
POSTGRES = Dialect("postgresql", "= ANY(${n})", "FOR UPDATE", "${n}", json_arrays=False,
                   now="coalesce(${n}::float8, extract(epoch FROM now())::float8)")
# SQLite has no row locks: its write transactions (BEGIN IMMEDIATE) hold the database's
# one write lock from start to end, which is stronger. It is one machine: its store's
# clock is the system clock, passed in, except where retention judges an age in the
# statement (NULL: SQLite's own reading of that clock, epoch seconds from julianday).
SQLITE = Dialect("sqlite", "IN (SELECT value FROM json_each(?{n}))", "", "?{n}", json_arrays=True,
                 now="coalesce(?{n}, (julianday('now') - 2440587.5) * 86400.0)")


class SqlConnection(Protocol):
    """A connection inside a transaction (or for a single read), in either dialect.
    Statements are shared text; the connection prepares them for its dialect."""

    dialect: Dialect

    async def fetch(self, sql: str, *args: Any) -> list[Sequence[Any]]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Sequence[Any] | None: ...

    async def fetchval(self, sql: str, *args: Any) -> Any: ...

    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; the number of rows it changed."""

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    async def notify(self, topic: str, run_ids: Sequence[int] = ()) -> None:
        """Tell other processes that `topic` ("queued", "done", "cancel", "events") changed
        for `run_ids`, when this transaction commits (PostgreSQL: NOTIFY; SQLite: other
        processes see the commit through their data-version poll, so nothing to send)."""
