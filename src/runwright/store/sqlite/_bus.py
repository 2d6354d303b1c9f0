"""The fleet's bus on SQLite, for processes of one machine: presence in `fleet_slots`, and
messages in `fleet_messages`, a table every process polls (every POLL_S, jittered).

SQLite has no notification between processes, so polling a small table is the honest
way: a message costs one insert, and each process reads what came after the last id it
saw. Messages older than KEEP_S are pruned by whoever sends.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence, TypeVar

from ...core._resilience import jittered
from ...core._waiting import halt
from ...errors import StoreUnreachable
from .._bus import Deliver, Hearing, decode, encode
from ..sql._bus import SqlBus
from ..sql._dialect import SQLITE

__all__ = ["SqliteBus"]

log = logging.getLogger("runwright.fleet")
T = TypeVar("T")
POLL_S = 0.05
KEEP_S = 300.0
SEND = "INSERT INTO fleet_messages (root, body, sent_at) VALUES ($1, $2, NOW)"
PRUNE = "DELETE FROM fleet_messages WHERE sent_at < NOW - $1"
LAST_ID = "SELECT coalesce(max(id), 0) FROM fleet_messages"
AFTER = "SELECT id, body FROM fleet_messages WHERE root = $1 AND id > $2 ORDER BY id"


class SqliteBus(SqlBus):
    dialect = SQLITE
    now_sql = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, path: str, root: str, *, uri: bool = False) -> None:
        super().__init__(root)
        self._path = path
        self._uri = uri  # a file: URI (the memory store's database), not a file's path
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._poller: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="runwright-fleet")
        self._conn = await self._call(self._connect)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, uri=self._uri, isolation_level=None, check_same_thread=False,
                               timeout=30.0)
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    async def close(self) -> None:
        if self._poller is not None:
            await halt(self._poller)
            self._poller = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self._call(lambda: conn.close())
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def _call(self, fn: Callable[[], T]) -> T:
        assert self._executor is not None, "fleet bus is not open"
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except sqlite3.OperationalError as exc:
            raise StoreUnreachable(f"sqlite: {exc}") from exc

    async def _fetch(self, statement: str, *args: Any) -> list[Sequence[Any]]:
        sql = self._sql(statement)
        return await self._call(lambda: self._db().execute(sql, args).fetchall())

    async def _execute(self, statement: str, *args: Any) -> int:
        sql = self._sql(statement)
        return await self._call(lambda: self._db().execute(sql, args).rowcount)

    def _db(self) -> sqlite3.Connection:
        assert self._conn is not None, "fleet bus is not open"
        return self._conn

    async def publish(self, message: Mapping[str, Any]) -> None:
        await self._execute(SEND, self.root, encode(message))
        if message.get("type") == "op":
            await self._execute(PRUNE, KEEP_S)

    async def subscribe(self, deliver: Deliver, hearing: Hearing) -> None:
        # The messages wait in the table: a failed poll loses none, so hearing never drops.
        if self._poller is None:
            last_id = int((await self._fetch(LAST_ID))[0][0])
            self._poller = asyncio.get_running_loop().create_task(self._poll(deliver, last_id))

    async def _poll(self, deliver: Deliver, last_id: int) -> None:
        while True:
            await asyncio.sleep(jittered(POLL_S))
            try:
                rows = await self._fetch(AFTER, self.root, last_id)
            except StoreUnreachable as exc:
                log.warning("fleet poll failed (%s); trying again", exc)
                continue
            for row_id, body in rows:
                last_id = int(row_id)
                message = decode(body)
                if message is not None:
                    deliver(message)
