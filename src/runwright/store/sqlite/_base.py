"""What the mixins of the SQLite store share (see `store` for its connections)."""

from __future__ import annotations

import asyncio

from ..sql._base import SqlBase
from ._connection import StoreThread

__all__ = ["SqliteBase"]


class SqliteBase(SqlBase):
    """What the concerns' mixins of `SqliteStore` share: the attributes it sets up
    (declared here for the type checker; `SqliteStore.__init__` assigns them)."""

    path: str
    _hot: StoreThread  # the hot path's connection and its thread
    _poller: asyncio.Task[None] | None
