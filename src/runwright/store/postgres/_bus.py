"""The fleet's bus on PostgreSQL: presence in `fleet_slots`, messages by LISTEN/NOTIFY.

One channel per root in the store's schema, named by a hash (a channel name is at most
63 bytes): `rwfleet_<crc32 of schema and root>`. While the listening session is down,
messages sent meanwhile are lost (NOTIFY does not replay); the session is taken again
with a backoff, and a broadcast in that gap reads `missing`, never applied.
"""

from __future__ import annotations

import asyncio
import logging
import os
import zlib
from typing import Any, Mapping, Sequence

import asyncpg

from ...core._waiting import halt
from ...errors import StoreUnreachable
from .._bus import Deliver, Hearing, decode, encode
from ..sql._bus import SqlBus
from ..sql._dialect import POSTGRES
from ._sql import qualify

__all__ = ["PostgresBus"]

log = logging.getLogger("runwright.fleet")
DOWN = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError,
        asyncpg.InternalClientError, TimeoutError, asyncpg.TooManyConnectionsError)


class PostgresBus(SqlBus):
    dialect = POSTGRES
    now_sql = "extract(epoch from clock_timestamp())::float8"

    def __init__(self, dsn: str, schema: str, root: str) -> None:
        """`dsn` is the store's session URL (its `direct=` one behind a transaction pooler):
        the fleet holds a LISTEN. No search_path, as for the store: statements name their
        schema (store.postgres.sql.qualify)."""
        super().__init__(root)
        self._dsn = dsn
        self._schema = schema
        # The pid names the process to an operator reading pg_stat_activity.
        self._settings = {"application_name": f"runwright-fleet:{os.getpid()}:{schema}"[:63]}
        self.channel = f"rwfleet_{zlib.crc32(f'{schema}:{root}'.encode()):08x}"
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncio.Task[None] | None = None

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=3, timeout=10,
                                                   server_settings=self._settings)
        except (*DOWN, asyncpg.PostgresError) as exc:
            raise StoreUnreachable(f"postgresql: the fleet cannot connect: {exc}") from exc

    async def close(self) -> None:
        if self._listener is not None:
            await halt(self._listener)
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _sql(self, statement: str) -> str:
        return qualify(super()._sql(statement), self._schema)

    async def _fetch(self, statement: str, *args: Any) -> list[Sequence[Any]]:
        assert self._pool is not None, "fleet bus is not open"
        try:
            return list(await self._pool.fetch(self._sql(statement), *args))
        except DOWN as exc:
            raise StoreUnreachable(f"postgresql: {type(exc).__name__}: {exc}") from exc

    async def _execute(self, statement: str, *args: Any) -> int:
        assert self._pool is not None, "fleet bus is not open"
        try:
            status = await self._pool.execute(self._sql(statement), *args)
        except DOWN as exc:
            raise StoreUnreachable(f"postgresql: {type(exc).__name__}: {exc}") from exc
        count = str(status).rsplit(" ", 1)[-1]
        return int(count) if count.isdigit() else 0

    async def publish(self, message: Mapping[str, Any]) -> None:
        await self._execute("SELECT pg_notify($1, $2)", self.channel, encode(message))

    async def subscribe(self, deliver: Deliver, hearing: Hearing) -> None:
        if self._listener is None:
            ready = asyncio.get_running_loop().create_future()
            self._listener = asyncio.get_running_loop().create_task(self._listen(deliver, hearing, ready))
            await asyncio.wait([ready, self._listener], return_when=asyncio.FIRST_COMPLETED)

    async def _listen(self, deliver: Deliver, hearing: Hearing, ready: asyncio.Future[None]) -> None:
        """Hold one LISTEN session, taken again after it drops (hearing says so both ways)."""
        backoff_s = 0.05
        deaf = False

        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            message = decode(payload)
            if message is not None:
                deliver(message)

        while True:
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            try:
                conn = await asyncpg.connect(self._dsn, timeout=10, server_settings=self._settings)
            except (*DOWN, asyncpg.PostgresError) as exc:
                log.warning("fleet listener cannot connect (%s); trying again", exc)
            else:
                def on_lost(_conn: asyncpg.Connection, lost: asyncio.Future[None] = lost) -> None:
                    if not lost.done():
                        lost.set_result(None)

                conn.add_termination_listener(on_lost)
                try:
                    await conn.add_listener(self.channel, on_notify)
                    backoff_s = 0.05
                    if not ready.done():
                        ready.set_result(None)
                    if deaf:
                        deaf = False
                        hearing(True)
                    await lost
                    log.warning("fleet listener connection lost; taking it again")
                except DOWN as exc:
                    log.warning("fleet listener failed: %s", exc)
                finally:
                    conn.terminate()
            if not ready.done():
                ready.set_result(None)
            if not deaf:
                deaf = True
                hearing(False)
            await asyncio.sleep(backoff_s)
            backoff_s = min(2.0, backoff_s * 2)
