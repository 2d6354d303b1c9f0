"""One transport per backend, chosen by the store the App uses; each opens connections of
its own (a LISTEN session, a pub/sub connection, a polling SQLite connection), so the
fleet never competes with runs for the store's pool."""

from __future__ import annotations

from ...store import Store
from ..transport import Transport

__all__ = ["transport_for"]


def transport_for(store: Store, root: str) -> Transport:
    from ...store.postgres.store import PostgresStore
    from ...store.redis.store import RedisStore
    from ...store.sqlite.store import SqliteStore

    if isinstance(store, PostgresStore):
        from .postgres import PostgresTransport

        return PostgresTransport(store.direct_dsn, store.schema, root)
    if isinstance(store, RedisStore):
        from .redis import RedisTransport

        return RedisTransport(store.client_url, store.prefix, root)
    if isinstance(store, SqliteStore):
        from .sqlite import SqliteTransport

        return SqliteTransport(store.path, root)
    raise TypeError(f"no fleet transport for {type(store).__name__}")
