"""PostgreSQL backend (asyncpg): the system of record for a cluster."""

from .store import PostgresStore

__all__ = ["PostgresStore"]
