"""What the mixins of the PostgreSQL store share (see `store` for its connections)."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Callable

import asyncpg

from .._liveness import Unmarked
from ..sql._base import SqlBase
from ._marks import Marks
from ._own import OwnSession
from ._watch import Watch

__all__ = ["DELIVERED", "LIMITED_KEY", "SCHEMA_KEY", "TRANSIENT", "PostgresBase"]

# The schema's own advisory key, beside the workers' marks (whose keys are their ids, from
# 1): migrations and unrunnable sweeps take it alone, registrations shared.
SCHEMA_KEY = 0
# The limited claim's key (sql.LIMITED_LOCK): below every worker's id, apart from SCHEMA_KEY.
LIMITED_KEY = -1
# This store's own channel beside the hub's: a signal delivered into a lingering wait
# (`signal_keep`), its journal entry in the payload, for the wait's process to read there.
DELIVERED = "delivered"
# Errors that mean "the connection or server went away": transient, worth a retry.
# InternalClientError is how asyncpg sometimes reports a session killed mid-operation
# (asyncpg issue #1069): the connection's protocol state is broken, so it is a disconnect.
# TooManyConnectionsError: the server (or the role) is at its connection limit, which
# passes as other clients leave.
TRANSIENT = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
             asyncpg.CannotConnectNowError, ConnectionError, asyncpg.InternalClientError,
             asyncpg.AdminShutdownError, asyncpg.TooManyConnectionsError)


class PostgresBase(SqlBase):
    """What the concerns' mixins of `PostgresStore` share: the attributes it sets up
    (declared here for the type checker; `PostgresStore.__init__` and `open` assign them)
    and its connections, which _store.py holds."""

    dsn: str
    schema: str
    pooled: bool
    lock_namespace: int
    channels: dict[str, str]
    session_name: str
    _pool: asyncpg.Pool | None
    _claiming: asyncpg.Pool | None
    _listener: asyncio.Task[None] | None
    _listened: list[str]
    _listener_ready: asyncio.Future[None] | None
    _listening: asyncpg.Connection | None
    _widening: asyncio.Lock
    _own: OwnSession
    _fleet_heard: dict[str, list[Callable[[str], None]]]  # a fleet's channel: its buses' ears
    _hearing: list[Callable[[bool], None]]  # the buses told as the listener goes and comes back
    _deaf: bool  # whether they were last told it went
    _marks: Marks
    _unmarked: Unmarked
    _watches: dict[int, Watch]
    # The waits of this process that linger registered, by (run, fence, position): the
    # journal entry delivered into each, once its notification came (None till then).
    _lingering_here: dict[tuple[int, int, int], str | None]

    if TYPE_CHECKING:  # the store's own (_store.py)
        def _sql(self, statement: str) -> str: ...

        async def _connect(self) -> asyncpg.Connection: ...

        def _conn(self, pool: asyncpg.Pool | None = None,
                  ) -> AbstractAsyncContextManager[asyncpg.Connection]: ...

        async def _fetch_raw(self, query: str, *args: Any) -> list[asyncpg.Record]: ...

        async def _observe_clock(self, conn: asyncpg.Connection) -> None: ...
