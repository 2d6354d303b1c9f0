"""An application's own counter table in the store's database, as the transactional-step
and transactional-submission tests keep one: on PostgreSQL in the test's schema (beside
runwright's tables, as a deployment may keep them), on SQLite in the store's file. Read
and made through a connection of the test's own."""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import asyncpg

from .conftest import PG_BASE


class AppTable:
    """A table `<prefix>_<random>` of (id TEXT PRIMARY KEY, n INTEGER) counters."""

    def __init__(self, store_url: str, prefix: str = "counters") -> None:
        self.url = store_url
        self.name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        if store_url.startswith("postgresql"):
            schema = store_url.split("schema=", 1)[1].split("&", 1)[0]
            self.name = f'"{schema}".{self.name}'

    async def execute(self, sql: str) -> list[tuple[Any, ...]]:
        if self.url.startswith("sqlite"):
            with sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=60) as conn:
                return conn.execute(sql).fetchall()
        conn = await asyncpg.connect(PG_BASE)
        try:
            return [tuple(row) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    async def create(self) -> None:
        await self.execute(f"CREATE TABLE {self.name} (id TEXT PRIMARY KEY, n INTEGER NOT NULL)")

    async def counts(self) -> dict[str, int]:
        return {row[0]: row[1] for row in await self.execute(f"SELECT id, n FROM {self.name}")}

    def bump(self) -> str:
        """The increment of counter $1 (made at 1), returning its count."""
        return (f"INSERT INTO {self.name} (id, n) VALUES ($1, 1) ON CONFLICT (id) DO UPDATE "
                f"SET n = {self.name.split('.')[-1]}.n + 1 RETURNING n")
