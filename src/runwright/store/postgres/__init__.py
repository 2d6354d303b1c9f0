"""PostgreSQL backend (asyncpg): the system of record for a cluster."""

from ._store import PostgresStore

__all__ = ["PostgresStore"]
