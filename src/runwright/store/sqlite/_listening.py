"""Change notifications of the SQLite store: SQLite has no LISTEN, so a poller reads
`PRAGMA data_version`, which changes whenever another connection commits, and wakes the
hub; our own writes wake it directly."""

from __future__ import annotations

import asyncio
import sqlite3

from ...errors import StoreError
from ._base import SqliteBase

__all__ = ["SqliteListening"]

POLL_INTERVAL_S = 0.005


class SqliteListening(SqliteBase):
    """`listen`: the poll of the file's version."""

    async def listen(self, runs: bool = True) -> None:
        # One poll of the file's version serves every topic: `runs` changes nothing here.
        if self._poller is None:
            # Read the starting version before returning: a commit made after listen()
            # returns must be seen as a change, never taken for the baseline.
            baseline = await self._hot.call(_data_version)
            # Two callers may both have found none and waited here: the second keeps the
            # first's poller (a second one would be left running when the store closes).
            if self._poller is None:
                self._poller = asyncio.get_running_loop().create_task(self._poll_changes(baseline))

    async def _poll_changes(self, last: int) -> None:
        """Wake the hub when another connection commits (PRAGMA data_version changes)."""
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            if not self.hub.has_waiters():
                continue
            try:
                version = await self._hot.call(_data_version)
            except StoreError:
                continue  # the next poll retries; waiters re-read on their fallback timer
            if version != last:
                last = version
                self.hub.fire_all()


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])
