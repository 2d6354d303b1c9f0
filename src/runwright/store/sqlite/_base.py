"""What the mixins of the SQLite store share (see `store` for its connections)."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING

from ..sql._base import SqlBase
from ._connection import StoreThread

__all__ = ["SqliteBase"]


class SqliteBase(SqlBase):
    """What the concerns' mixins of `SqliteStore` share: the attributes it sets up
    (declared here for the type checker; `SqliteStore.__init__` assigns them)."""

    path: str
    _hot: StoreThread  # the hot path's connection and its thread
    _transacting: StoreThread  # the application's transactions' (see _transactions)
    _transacting_turn: asyncio.Lock
    _poller: asyncio.Task[None] | None

    if TYPE_CHECKING:  # the store's own (_store.py)
        def _connect(self) -> sqlite3.Connection: ...
