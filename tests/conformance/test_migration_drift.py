"""The numbered migrations build exactly the schema that `schema.sql` describes."""

from __future__ import annotations

import re
import sqlite3
from importlib import resources

import asyncpg

from runwright.store import store_from_url

from ..conftest import PG_BASE


def _reference(package: str) -> str:
    return resources.files(package).joinpath("schema.sql").read_text()


def _sqlite_shape(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
                        " AND name != 'schema_versions' ORDER BY name").fetchall()
    return [(kind, name, _normal(sql or "")) for kind, name, sql in rows]


def _normal(sql: str) -> str:
    """SQLite keeps a CREATE statement's text as written (and quotes a renamed table's
    name): drop comments, spacing and those quotes."""
    sql = re.sub(r"--[^\n]*", "", sql)
    sql = re.sub(r'^CREATE TABLE "(\w+)"', r"CREATE TABLE \1", sql.strip())
    sql = re.sub(r"\s+", " ", sql)
    return sql.replace("( ", "(").replace(" )", ")").replace(" ,", ",").strip()


async def test_sqlite_migrations_match_the_reference_schema(tmp_path):
    store = store_from_url(f"sqlite:///{tmp_path / 'migrated.db'}")
    await store.open()
    await store.migrate()
    await store.close()
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    fresh.executescript(_reference("runwright.store.sqlite"))
    migrated = sqlite3.connect(tmp_path / "migrated.db")
    assert _sqlite_shape(migrated) == _sqlite_shape(fresh) != []


async def _pg_shape(conn: asyncpg.Connection, schema: str) -> dict[str, list]:
    columns = await conn.fetch(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity"
        " FROM information_schema.columns WHERE table_schema = $1 AND table_name != 'schema_versions'"
        " ORDER BY table_name, ordinal_position", schema)
    indexes = await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1"
                               " AND tablename != 'schema_versions' ORDER BY indexname", schema)
    checks = await conn.fetch(
        "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 ORDER BY conname", schema)
    return {
        "columns": [tuple(r) for r in columns],
        "indexes": [(r[0], r[1].replace(f"{schema}.", "")) for r in indexes],
        "constraints": [(r[0], r[1]) for r in checks if not r[0].startswith("schema_versions")],
    }


async def test_postgres_migrations_match_the_reference_schema():
    conn = await asyncpg.connect(PG_BASE)
    migrated, fresh = "rw_drift_migrated", "rw_drift_fresh"
    try:
        for schema in (migrated, fresh):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        store = store_from_url(f"{PG_BASE}?schema={migrated}")
        await store.open()
        await store.migrate()
        await store.close()
        await conn.execute(f'CREATE SCHEMA "{fresh}"')
        await conn.execute(f'SET search_path TO "{fresh}"')
        await conn.execute(_reference("runwright.store.postgres"))
        got, want = await _pg_shape(conn, migrated), await _pg_shape(conn, fresh)
        assert got == want and got["columns"]
    finally:
        for schema in (migrated, fresh):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
