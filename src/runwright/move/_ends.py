"""The two ends of a move, one class per backend: read a table in key order, write rows
idempotently, keep the move's mark, seal with triggers. Raw connections, not a Store: a
move reads a sealed store and writes one no process may use yet.

Text keys are ordered by their bytes on both ends (PostgreSQL's "C" collation is
SQLite's BINARY), so a table read from one end in key order is in key order on the
other, and the target's last key says how far an interrupted copy got.
"""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
from typing import Any, Protocol, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from ..errors import ConfigError, StoreUnreachable
from ..store._moved import MARK, NEVER
from ._kinds import LEFT

__all__ = ["End", "PostgresEnd", "SqliteEnd", "open_end", "refuse_kind", "seconds"]

# What the seal leaves writable: what is not copied (the source's processes' liveness, which
# they keep up until they stop, and `leases`, where the move keeps its mark).
SEALED_BUT = frozenset({*LEFT, "sqlite_sequence"})
# The seal's wait for each table: under the server's deadlock_timeout (1 s by default), so
# that where a writer and the seal wait on each other, the seal is the one that gives way.
LOCK_TIMEOUT_MS = 200
SEAL_TRIES = 300  # a minute of tries at the most


class End(Protocol):
    """What the move asks of one store."""

    url: str
    shown: str  # the URL as a message shows it (no password)

    async def identity(self) -> str: ...  # the database itself, however its URL is spelled

    async def close(self) -> None: ...
    async def tables(self) -> set[str]: ...
    async def columns(self, table: str) -> list[str]: ...
    async def count(self, table: str) -> int: ...
    async def rows(self, table: str, columns: Sequence[str], key: Sequence[str],
                   after: Sequence[Any] | None, limit: int) -> list[list[Any]]: ...
    async def last_key(self, table: str, key: Sequence[str]) -> list[Any] | None: ...
    async def insert(self, table: str, columns: Sequence[str], rows: list[list[Any]]) -> None: ...
    async def read_mark(self) -> str | None: ...
    async def write_mark(self, holder: str | None) -> None: ...
    async def seal(self, holder: str, text: str) -> None: ...
    async def unseal(self) -> None: ...
    async def next_id(self, table: str) -> int: ...
    async def ensure_next_id(self, table: str, next_id: int) -> None: ...
    async def run_keys_from_runs(self) -> None: ...


class SqliteEnd(End):
    def __init__(self, url: str, path: str) -> None:
        self.url = self.shown = url
        self.path = path
        try:
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise StoreUnreachable(f"sqlite: cannot open {path}: {exc}") from None

    async def identity(self) -> str:
        return f"sqlite:{os.path.realpath(self.path)}"

    async def close(self) -> None:
        self.conn.close()

    async def tables(self) -> set[str]:
        return {row[0] for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    async def columns(self, table: str) -> list[str]:
        return [row[1] for row in self.conn.execute(f'PRAGMA table_info("{table}")')]

    async def count(self, table: str) -> int:
        return int(self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

    async def rows(self, table: str, columns: Sequence[str], key: Sequence[str],
                   after: Sequence[Any] | None, limit: int) -> list[list[Any]]:
        keys = ", ".join(f'"{k}"' for k in key)
        where = f"WHERE ({keys}) > ({', '.join('?' * len(key))})" if after is not None else ""
        names = ", ".join(f'"{c}"' for c in columns)
        cursor = self.conn.execute(f'SELECT {names} FROM "{table}" {where} ORDER BY {keys} LIMIT {limit}',
                                   tuple(after or ()))
        return [list(row) for row in cursor]

    async def last_key(self, table: str, key: Sequence[str]) -> list[Any] | None:
        keys = ", ".join(f'"{k}"' for k in key)
        order = ", ".join(f'"{k}" DESC' for k in key)
        row = self.conn.execute(f'SELECT {keys} FROM "{table}" ORDER BY {order} LIMIT 1').fetchone()
        return list(row) if row is not None else None

    async def insert(self, table: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("?" * len(columns))
        # OR IGNORE: a row a killed copy wrote already stays as it is (the source is sealed).
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({marks})', rows)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    async def read_mark(self) -> str | None:
        if "leases" not in await self.tables():
            return None
        row = self.conn.execute("SELECT holder FROM leases WHERE name = ?", (MARK,)).fetchone()
        return row[0] if row is not None else None

    async def write_mark(self, holder: str | None) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self._put_mark(holder)
        self.conn.execute("COMMIT")

    def _put_mark(self, holder: str | None) -> None:
        if holder is None:
            self.conn.execute("DELETE FROM leases WHERE name = ?", (MARK,))
        else:
            self.conn.execute("INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)"
                              " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder",
                              (MARK, holder, NEVER))

    async def seal(self, holder: str, text: str) -> None:
        """In one write transaction (the one writer of the file): every write after it is
        refused by the database itself, from any process, of any version."""
        literal = text.replace("'", "''")
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self._drop_triggers()
            for table in sorted(await self.tables()):
                if table in SEALED_BUT:
                    continue
                for action in ("INSERT", "UPDATE", "DELETE"):
                    name = f"runwright_sealed_{table}_{action.lower()}"
                    self.conn.execute(f'CREATE TRIGGER "{name}" BEFORE {action} ON "{table}"'
                                      f" BEGIN SELECT RAISE(ABORT, '{literal}'); END")
            self._put_mark(holder)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _drop_triggers(self) -> None:
        for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                         " AND name LIKE 'runwright_sealed_%'").fetchall():
            self.conn.execute(f'DROP TRIGGER "{name}"')

    async def unseal(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self._drop_triggers()
        self._put_mark(None)
        self.conn.execute("COMMIT")

    async def next_id(self, table: str) -> int:
        (top,) = self.conn.execute(f'SELECT coalesce(max(id), 0) FROM "{table}"').fetchone()
        if table == "workers":  # AUTOINCREMENT: never an id given before, even a deleted one's
            row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'workers'").fetchone()
            top = max(top, row[0] if row else 0)
        return int(top) + 1

    async def ensure_next_id(self, table: str, next_id: int) -> None:
        if table == "workers":
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("DELETE FROM sqlite_sequence WHERE name = 'workers'")
            self.conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('workers', ?)", (next_id - 1,))
            self.conn.execute("COMMIT")
        # runs: an INTEGER PRIMARY KEY takes max(id) + 1, which the copied runs set already
        # (ids above the last run that retention reclaimed are in `reclaimed`, copied too).

    async def run_keys_from_runs(self) -> None:
        return None  # SQLite keeps a run's key unique on runs itself


class PostgresEnd(End):
    def __init__(self, url: str, conn: asyncpg.Connection, schema: str, shown: str) -> None:
        self.url = url
        self.conn = conn
        self.schema = schema
        self.shown = shown
        self._types: dict[str, dict[str, str]] = {}

    @classmethod
    async def connect(cls, url: str) -> PostgresEnd:
        from ..store.postgres._pooling import safe_dsn

        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query))
        schema = options.pop("schema", "runwright")
        for option in ("pool_size", "direct"):
            options.pop(option, None)
        dsn = urlunsplit(parts._replace(query=urlencode(options)))
        try:
            conn = await asyncpg.connect(dsn, timeout=10, server_settings={"search_path": f'"{schema}"'})
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreUnreachable(f"postgresql: cannot connect to {safe_dsn(url)}: {exc}") from None
        return cls(url, conn, schema, safe_dsn(url))

    async def identity(self) -> str:
        try:  # the cluster's own id, whichever address reached it
            server = str(await self.conn.fetchval("SELECT system_identifier FROM pg_control_system()"))
        except asyncpg.InsufficientPrivilegeError:  # a role without pg_monitor: its address
            server = str(await self.conn.fetchval("SELECT concat(inet_server_addr(), ':',"
                                                  " inet_server_port())"))
        database = await self.conn.fetchval("SELECT current_database()")
        return f"postgresql:{server}/{database}/{self.schema}"

    async def close(self) -> None:
        await self.conn.close()

    async def tables(self) -> set[str]:
        rows = await self.conn.fetch("SELECT table_name FROM information_schema.tables"
                                     " WHERE table_schema = $1 AND table_type = 'BASE TABLE'", self.schema)
        return {row[0] for row in rows}

    async def _column_types(self, table: str) -> dict[str, str]:
        if table not in self._types:
            rows = await self.conn.fetch(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position", self.schema, table)
            self._types[table] = {row[0]: row[1] for row in rows}
        return self._types[table]

    async def columns(self, table: str) -> list[str]:
        return list(await self._column_types(table))

    async def count(self, table: str) -> int:
        return int(await self.conn.fetchval(f'SELECT count(*) FROM "{table}"'))

    async def _ordered(self, table: str, key: Sequence[str]) -> list[str]:
        types = await self._column_types(table)
        return [f'"{k}" COLLATE "C"' if types[k] == "text" else f'"{k}"' for k in key]

    async def rows(self, table: str, columns: Sequence[str], key: Sequence[str],
                   after: Sequence[Any] | None, limit: int) -> list[list[Any]]:
        keys = ", ".join(await self._ordered(table, key))
        names = ", ".join(f'"{c}"' for c in columns)
        if after is None:
            found = await self.conn.fetch(f'SELECT {names} FROM "{table}" ORDER BY {keys} LIMIT {limit}')
        else:
            marks = ", ".join(f"${i + 1}" for i in range(len(key)))
            found = await self.conn.fetch(f'SELECT {names} FROM "{table}" WHERE ({keys}) > ({marks})'
                                          f" ORDER BY {keys} LIMIT {limit}", *after)
        return [list(row) for row in found]

    async def last_key(self, table: str, key: Sequence[str]) -> list[Any] | None:
        order = ", ".join(f"{k} DESC" for k in await self._ordered(table, key))
        names = ", ".join(f'"{k}"' for k in key)
        row = await self.conn.fetchrow(f'SELECT {names} FROM "{table}" ORDER BY {order} LIMIT 1')
        return list(row) if row is not None else None

    async def insert(self, table: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        types = await self._column_types(table)
        fitted = [tuple(_fit(types[c], v) for c, v in zip(columns, row)) for row in rows]
        names = ", ".join(f'"{c}"' for c in columns)
        staged = f"runwright_move_{table}"
        # COPY into a session's temporary table, then one INSERT that skips what a killed
        # copy wrote already (the source is sealed: the same rows).
        async with self.conn.transaction():
            await self.conn.execute(f'CREATE TEMP TABLE IF NOT EXISTS "{staged}"'
                                    f' (LIKE "{self.schema}"."{table}") ON COMMIT DELETE ROWS')
            await self.conn.copy_records_to_table(staged, records=fitted, columns=list(columns),
                                                  schema_name=None)
            overriding = " OVERRIDING SYSTEM VALUE" if table in ("runs", "workers") else ""
            await self.conn.execute(f'INSERT INTO "{table}" ({names}){overriding} SELECT {names}'
                                    f' FROM "{staged}" ON CONFLICT DO NOTHING')

    async def read_mark(self) -> str | None:
        if "leases" not in await self.tables():
            return None
        holder: str | None = await self.conn.fetchval("SELECT holder FROM leases WHERE name = $1", MARK)
        return holder

    async def write_mark(self, holder: str | None) -> None:
        await self._put_mark(holder)

    async def _put_mark(self, holder: str | None) -> None:
        if holder is None:
            await self.conn.execute("DELETE FROM leases WHERE name = $1", MARK)
        else:
            await self.conn.execute("INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)"
                                    " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder",
                                    MARK, holder, NEVER)

    async def seal(self, holder: str, text: str) -> None:
        """One transaction: making each trigger waits for the writes in flight on its
        table, and every write after the commit is refused by the server itself."""
        literal = text.replace("'", "''")
        tables = sorted(t for t in await self.tables() if t not in SEALED_BUT)
        for tries in range(SEAL_TRIES):
            try:
                await self._seal(holder, literal, tables)
                return
            except (asyncpg.DeadlockDetectedError, asyncpg.LockNotAvailableError):
                # A writer's transaction holds a table and may want one the seal holds:
                # the seal gives way (its lock_timeout ends before the server would judge
                # a deadlock and might roll the writer back), and tries again.
                if tries == SEAL_TRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (tries % 10))

    async def _seal(self, holder: str, literal: str, tables: list[str]) -> None:
        async with self.conn.transaction():
            # Every table at once, before any trigger: the writes in flight end first, and
            # none starts until the seal commits (a writer then meets the trigger).
            names = ", ".join(f'"{table}"' for table in tables)
            await self.conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
            await self.conn.execute(f"LOCK TABLE {names} IN SHARE ROW EXCLUSIVE MODE")
            await self.conn.execute(
                "CREATE OR REPLACE FUNCTION runwright_sealed() RETURNS trigger LANGUAGE plpgsql AS"
                f" $sealed$ BEGIN RAISE EXCEPTION '%', '{literal}'; END $sealed$")
            for table in tables:
                await self.conn.execute(f'DROP TRIGGER IF EXISTS runwright_sealed ON "{table}"')
                await self.conn.execute(f'CREATE TRIGGER runwright_sealed BEFORE INSERT OR UPDATE OR DELETE'
                                        f' OR TRUNCATE ON "{table}" FOR EACH STATEMENT'
                                        f" EXECUTE FUNCTION runwright_sealed()")
            await self._put_mark(holder)

    async def unseal(self) -> None:
        async with self.conn.transaction():
            for table in sorted(await self.tables()):
                await self.conn.execute(f'DROP TRIGGER IF EXISTS runwright_sealed ON "{table}"')
            await self.conn.execute("DROP FUNCTION IF EXISTS runwright_sealed()")
            await self._put_mark(None)

    async def _sequence(self, table: str) -> str:
        name: str = await self.conn.fetchval("SELECT pg_get_serial_sequence($1, 'id')",
                                             f'"{self.schema}"."{table}"')
        return name

    async def _sequence_next(self, table: str) -> int:
        """The id the identity gives next (rows copied with their ids did not move it)."""
        sequence = await self._sequence(table)
        last, called = await self.conn.fetchrow(f"SELECT last_value, is_called FROM {sequence}")
        return int(last) + 1 if called else int(last)

    async def next_id(self, table: str) -> int:
        top = await self.conn.fetchval(f'SELECT coalesce(max(id), 0) FROM "{table}"')
        return max(int(top) + 1, await self._sequence_next(table))

    async def ensure_next_id(self, table: str, next_id: int) -> None:
        if await self._sequence_next(table) < next_id:
            await self.conn.execute("SELECT setval($1, $2, true)", await self._sequence(table), next_id - 1)

    async def run_keys_from_runs(self) -> None:
        await self.conn.execute("INSERT INTO run_keys (tenant, key, run_id)"
                                " SELECT coalesce(tenant, ''), key, id FROM runs ON CONFLICT DO NOTHING")


def _fit(kind: str, value: Any) -> Any:
    """A value from either end as a PostgreSQL column of `kind` takes it (SQLite keeps
    booleans as 0/1, and a REAL as an integer when it has no fraction)."""
    if value is None:
        return None
    if kind == "boolean":
        return bool(value)
    if kind == "double precision":
        return float(value)
    return value


def refuse_kind(url: str, *, target: bool = False) -> None:
    """ConfigError unless `url` names a store a move can read (a source) or write (a
    target: Redis too)."""
    scheme = url.split(":", 1)[0].lower()
    if target and scheme in ("redis", "rediss"):
        return
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise ConfigError(f"{scheme}: `runwright move` moves from SQLite or PostgreSQL to SQLite,"
                          f" PostgreSQL or Redis so far (from Redis, and memory:// either way, are not"
                          f" supported yet)")


async def open_end(url: str, *, target: bool = False) -> End:
    refuse_kind(url, target=target)
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("redis", "rediss"):
        from ._redis_end import RedisEnd

        return await RedisEnd.connect(url)
    if scheme == "sqlite":
        path = url[len("sqlite:///"):].partition("?")[0]
        if not url.startswith("sqlite:///") or not path:
            raise ConfigError(f"{url!r}: a SQLite URL is sqlite:///relative.db or sqlite:////abs/path.db")
        return SqliteEnd(url, path)
    return await PostgresEnd.connect(url)


def seconds(rows: int, per_s: float) -> int:
    return max(1, math.ceil(rows / per_s))

