"""The caller's own connection to the store's database, for what runwright writes inside the
caller's transaction (a submission, a transactional step's journal entry): asyncpg's, as
it is, or psycopg 3's, behind asyncpg's calls.

The store's statements are asyncpg's (`$n` parameters, arrays as lists). psycopg takes
`%(name)s`: each `$n` becomes `%(pn)s` (a parameter may be named twice, or out of order)
and a literal `%` is doubled. Rows come back as tuples, read by position as the store reads
asyncpg's records; no statement of the store's returns a json column psycopg would decode."""

from __future__ import annotations

import re
from typing import Any, Sequence

import asyncpg

from ...errors import InvalidInput

__all__ = ["PsycopgConnection", "caller_connection"]

_PLACEHOLDER = re.compile(r"\$(\d+)")


def _is_psycopg(connection: Any) -> bool:
    return type(connection).__module__.startswith("psycopg") and hasattr(connection, "cursor")


class PsycopgConnection:
    """asyncpg's `fetch`, `fetchrow`, `fetchval`, `execute` and `executemany` over a
    psycopg 3 AsyncConnection (the calls the store makes of a connection it writes through)."""

    def __init__(self, connection: Any) -> None:
        self._conn = connection

    async def fetch(self, query: str, *args: Any) -> list[Sequence[Any]]:
        async with self._conn.cursor() as cursor:
            await cursor.execute(_named(query), _values(args))
            return list(await cursor.fetchall()) if cursor.description is not None else []

    async def fetchrow(self, query: str, *args: Any) -> Sequence[Any] | None:
        rows = await self.fetch(query, *args)
        return rows[0] if rows else None

    async def fetchval(self, query: str, *args: Any) -> Any:
        row = await self.fetchrow(query, *args)
        return None if row is None else row[0]

    async def execute(self, query: str, *args: Any) -> str:
        """The command's status, as asyncpg answers it ("UPDATE 3")."""
        async with self._conn.cursor() as cursor:
            await cursor.execute(_named(query), _values(args))
            return str(cursor.statusmessage or "")

    async def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._conn.cursor() as cursor:
            await cursor.executemany(_named(query), [_values(row) for row in rows])


def _named(query: str) -> str:
    return _PLACEHOLDER.sub(r"%(p\1)s", query.replace("%", "%%"))


def _values(args: Sequence[Any]) -> dict[str, Any]:
    return {f"p{n}": value for n, value in enumerate(args, 1)}


def caller_connection(connection: Any) -> Any:
    """The connection to write through in the caller's open transaction (asyncpg's, or a
    psycopg one behind asyncpg's calls); InvalidInput, one line, when it is another kind of
    connection or in no transaction."""
    if isinstance(connection, asyncpg.Connection):
        if not connection.is_in_transaction():
            raise InvalidInput("connection= writes inside the caller's open transaction, and this "
                               "connection is in none: begin one (async with conn.transaction():)")
        return connection
    if _is_psycopg(connection):
        from psycopg.pq import TransactionStatus  # the caller's own driver: it has it

        if connection.info.transaction_status != TransactionStatus.INTRANS:
            raise InvalidInput("connection= writes inside the caller's open transaction, and this "
                               "connection is in none: begin one (async with conn.transaction():)")
        return PsycopgConnection(connection)
    raise InvalidInput(f"connection= on PostgreSQL takes an asyncpg or psycopg 3 async connection (or "
                       f"a SQLAlchemy AsyncConnection or AsyncSession over either), got "
                       f"{type(connection).__name__}")
