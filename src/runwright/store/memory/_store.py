"""The memory store: a deployment that lives and dies with one process.

For tests of a user's tasks and agents (`runwright.testing`), examples and notebooks: no
file, no server, nothing left behind. It is the SQLite store on a database that SQLite
keeps in memory (its `memdb` VFS), not a fourth implementation: every rule, statement
and race it has is the SQLite store's, which the conformance suite runs on every backend,
this one too. A database named `/<name>` is shared by the connections of this process
that name it (the store's two, and another store opened on the same URL); each store
also keeps an idle one for as long as the store object lives, so a store closed and opened
again finds its runs, as on any backend, and the memory is freed when the last store of a
name is gone. Another process never sees it: a worker process, or a CLI command,
cannot serve or read it (_urls.py refuses it to them).
"""

from __future__ import annotations

import sqlite3
import uuid
import weakref

from ...core._clock import SYSTEM_CLOCK, Clock
from .._bus import Bus
from ..sqlite._store import SqliteStore

__all__ = ["MemoryStore", "SCHEME"]

SCHEME = "memory"


class MemoryStore(SqliteStore):
    """Store in this process's memory. See `runwright.store._interface.Store`."""

    def __init__(self, url: str, name: str | None = None, *, clock: Clock = SYSTEM_CLOCK) -> None:
        name = name or uuid.uuid4().hex  # memory:// alone: a database of this store's own
        super().__init__(url, f"file:/{name}?vfs=memdb", clock=clock)
        self.where = f"memory database {name!r}"
        self._keeper: sqlite3.Connection | None = None

    async def open(self, create: bool = True) -> None:
        if self._keeper is None:
            self._keeper = sqlite3.connect(self.path, uri=True, check_same_thread=False)
            weakref.finalize(self, self._keeper.close)
        await super().open(create)

    def bus(self, root: str) -> Bus:
        """SQLite's bus on this memory database (its path is a `file:` URI): this
        process's fleet alone, as the store is this process's alone."""
        from ..sqlite._bus import SqliteBus

        return SqliteBus(self.path, root, uri=True)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, uri=True, isolation_level=None, check_same_thread=False,
                               timeout=30.0)
        # The two connections of the store take turns on SQLite's locks as two processes
        # would on a file (memdb has no WAL): a writer waits for the other's commit.
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def _check_place(self, create: bool) -> None:
        """Memory is always there; a reader that opens a database never made finds no
        schema (SchemaError), as one in the wrong folder does."""
