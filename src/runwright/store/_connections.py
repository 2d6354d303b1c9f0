"""The caller's own database connection, for a submission inside its open transaction
(`submit(..., connection=conn)`): the driver's connection the store writes through.

The store takes its own driver's connection (asyncpg on PostgreSQL, sqlite3 on SQLite).
A SQLAlchemy `AsyncConnection` or `AsyncSession` is unwrapped to the driver connection
under it, which is in the same transaction (SQLAlchemy is not imported: an application
that uses it has it)."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["driver_connection"]


async def driver_connection(given: Any) -> Any:
    """The driver connection under `given` (itself, when it is one)."""
    if hasattr(given, "get_raw_connection") and hasattr(given, "in_transaction"):  # AsyncConnection
        if given.in_transaction():
            # SQLAlchemy begins the driver's transaction at its first statement: begun
            # here, so the run is written inside it and not in autocommit.
            await given.exec_driver_sql("SELECT 1")
        raw = await given.get_raw_connection()
        return raw.driver_connection
    connection = getattr(given, "connection", None)
    if hasattr(given, "sync_session") and inspect.iscoroutinefunction(connection):  # AsyncSession
        return await driver_connection(await given.connection())
    return given
