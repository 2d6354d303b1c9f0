"""SQLite backend: one file, many processes on one machine, zero set-up."""

from ._store import SqliteStore

__all__ = ["SqliteStore"]
