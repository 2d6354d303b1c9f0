"""SQLite backend: one file, many processes on one machine, zero set-up."""

from .store import SqliteStore

__all__ = ["SqliteStore"]
