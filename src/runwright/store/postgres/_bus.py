"""The fleet's bus on PostgreSQL: presence in `fleet_slots`, messages by LISTEN/NOTIFY.

One channel per root in the store's schema, named by a hash (a channel name is at most
63 bytes): `rwfleet_<crc32 of schema and root>`. The bus holds no session of its own: its
statements and its LISTEN are on the process's own session (see _own.py), which the
store LISTENs on, so a fleet member holds no more sessions than its store. Not the
store's pool: a presence heartbeat would queue there behind a burst's statements (behind
a transaction pooler, behind every worker's, for the pooler's few server sessions) while
the fleet's TTL runs; the own session is the server's, as the bus's were, and idle.

While that session is down, messages sent meanwhile are lost (NOTIFY does not replay);
the store takes it again with a backoff, and a broadcast in that gap reads `missing`,
never applied.
"""

from __future__ import annotations

import zlib
from typing import Any, Awaitable, Callable, Mapping, Sequence

import asyncpg

from ...errors import StoreUnreachable
from .._bus import Deliver, Hearing, decode, encode
from ..sql._bus import SqlBus
from ..sql._dialect import POSTGRES
from ._listening import PostgresListening
from ._sql import qualify

__all__ = ["PostgresBus"]

DOWN = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError,
        asyncpg.InternalClientError, TimeoutError, asyncpg.TooManyConnectionsError)


class PostgresBus(SqlBus):
    dialect = POSTGRES
    now_sql = "extract(epoch from clock_timestamp())::float8"

    def __init__(self, store: PostgresListening, root: str) -> None:
        """On `store`'s connections (a PostgresStore's); no search_path, as for the store: statements name
        their schema (store.postgres.sql.qualify)."""
        super().__init__(root)
        self._store = store
        self._schema = store.schema
        self.channel = f"rwfleet_{zlib.crc32(f'{store.schema}:{root}'.encode()):08x}"
        self._open = False
        self._subscribed: tuple[Callable[[str], None], Hearing] | None = None  # its ears on the store

    async def open(self) -> None:
        self._open = True  # the store's connections are open already (or say so when used)

    async def close(self) -> None:
        self._open = False
        if self._subscribed is not None:
            self._store.unlisten_fleet(self.channel, *self._subscribed)
            self._subscribed = None

    def _sql(self, statement: str) -> str:
        return qualify(super()._sql(statement), self._schema)

    async def _fetch(self, statement: str, *args: Any) -> list[Sequence[Any]]:
        assert self._open, "fleet bus is not open"
        rows = await self._on_own(lambda conn: conn.fetch(self._sql(statement), *args))
        return [row for row in rows]

    async def _execute(self, statement: str, *args: Any) -> int:
        assert self._open, "fleet bus is not open"
        status = await self._on_own(lambda conn: conn.execute(self._sql(statement), *args))
        count = str(status).rsplit(" ", 1)[-1]
        return int(count) if count.isdigit() else 0

    async def _on_own(self, statement: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
        """A statement on the process's own session, in its turn."""
        try:
            async with self._store._own.use() as conn:
                try:
                    return await statement(conn)
                except DOWN:
                    # Half-read, maybe (see Marks.broken): ended, so that the store's
                    # listener and the marks take the process's next session.
                    conn.terminate()
                    raise
        except DOWN as exc:
            raise StoreUnreachable(f"postgresql: {type(exc).__name__}: {exc}") from exc

    async def publish(self, message: Mapping[str, Any]) -> None:
        await self._execute("SELECT pg_notify($1, $2)", self.channel, encode(message))

    async def subscribe(self, deliver: Deliver, hearing: Hearing) -> None:
        if self._subscribed is not None:
            return

        def heard(payload: str) -> None:
            message = decode(payload)
            if message is not None and self._open:
                deliver(message)

        self._subscribed = (heard, hearing)
        await self._store.listen_fleet(self.channel, heard, hearing)
