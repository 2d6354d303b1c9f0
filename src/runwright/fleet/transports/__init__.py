"""One transport per backend, chosen by the store the App uses; each opens connections of
its own (a LISTEN session, a pub/sub connection, a polling SQLite connection), so the
fleet never competes with runs for the store's pool."""

from __future__ import annotations

from ...store import Store
from ..transport import Transport

__all__ = ["transport_for"]


def transport_for(store: Store, root: str) -> Transport:
    # By the store's module, importing only its own backend: a worker on PostgreSQL never
    # loads redis-py (a tenth of its start).
    backend = type(store).__module__.rsplit(".", 2)[-2]
    if backend == "postgres":
        from ...store.postgres.store import PostgresStore
        from .postgres import PostgresTransport

        assert isinstance(store, PostgresStore)
        return PostgresTransport(store.direct_dsn, store.schema, root)
    if backend == "redis":
        from ...store.redis.store import RedisStore
        from .redis import RedisTransport

        assert isinstance(store, RedisStore)
        return RedisTransport(store.client_url, store.prefix, root)
    if backend in ("sqlite", "memory"):  # memory: SQLite's store on an in-memory database
        from ...store.sqlite.store import SqliteStore
        from .sqlite import SqliteTransport

        assert isinstance(store, SqliteStore)
        return SqliteTransport(store.path, root, uri=backend == "memory")
    raise TypeError(f"no fleet transport for {type(store).__name__}")
