"""Verify's own place in the user's store, so that nothing of theirs is touched: on
PostgreSQL a fresh schema, on Redis a namespace of its own, on SQLite a file of its own
next to the given one. `drop` removes it; the runner calls it at the end and on an
interrupt."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from ..store._urls import DEFAULT_URL

__all__ = ["Place", "place_for"]

PREFIX = "rw_verify_"
RUNWRIGHT_OPTIONS = {"schema", "namespace", "pool_size", "direct"}  # not the driver's


@dataclass(frozen=True, slots=True)
class Place:
    backend: str  # "sqlite", "postgres" or "redis"
    url: str  # the store URL verify's workers and client use
    name: str  # the schema, namespace or file
    admin_url: str  # PostgreSQL/Redis without runwright's options: for faults and the drop

    async def drop(self) -> None:
        """Remove everything verify wrote (idempotent)."""
        if self.backend == "sqlite":
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(self.name + suffix).unlink(missing_ok=True)
        elif self.backend == "postgres":
            import asyncpg

            conn = await asyncpg.connect(self.admin_url)
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')
            finally:
                await conn.close()
        else:
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(self.admin_url)
            try:
                batch = [key async for key in client.scan_iter(match=f"rw:{{{self.name}}}:*", count=1000)]
                for start in range(0, len(batch), 1000):
                    await client.unlink(*batch[start:start + 1000])
            finally:
                await client.aclose()


def place_for(url: str | None) -> Place:
    """A fresh place beside `url`'s (the same database or server, its own name)."""
    url = url or DEFAULT_URL
    name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = url[len("sqlite:///"):].split("?", 1)[0]
        if not path or path == ":memory:":
            raise ConfigError(f"{url!r}: verify needs a SQLite file (its workers are processes)")
        own = str(Path(path).parent / f"{name}.db")
        return Place("sqlite", f"sqlite:///{own}", own, "")
    options = [(k, v) for k, v in parse_qsl(parts.query) if k not in RUNWRIGHT_OPTIONS]
    admin = urlunsplit(parts._replace(query=urlencode(options)))
    if parts.scheme in ("postgresql", "postgres"):
        backend, option = "postgres", "schema"
    elif parts.scheme in ("redis", "rediss"):
        backend, option = "redis", "namespace"
    else:
        raise ConfigError(f"{url!r}: verify runs on sqlite:///, postgresql:// or redis:// URLs")
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k != option]
    own_url = urlunsplit(parts._replace(query=urlencode([*kept, (option, name)])))
    return Place(backend, own_url, name, admin)
