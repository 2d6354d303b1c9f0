"""The numbered migrations build exactly the schema that `schema.sql` describes, and a
database that holds nothing is given that schema whole (one script, not every step)."""

from __future__ import annotations

import re
import sqlite3

import asyncpg
import pytest

from runwright.store import store_from_url
from runwright.store._migrations import schema_sql

from ..conftest import PG_BASE


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
    await _migrated_step_by_step(f"sqlite:///{tmp_path / 'migrated.db'}")
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    fresh.executescript(schema_sql("runwright.store.sqlite"))
    migrated = sqlite3.connect(tmp_path / "migrated.db")
    assert _sqlite_shape(migrated) == _sqlite_shape(fresh) != []


async def _migrated_step_by_step(url: str) -> None:
    """Every numbered migration applied in turn, as on a database an early release made
    (from version 1: from nothing, `migrate` would apply schema.sql itself)."""
    store = store_from_url(url)
    await store.open()
    try:
        assert await store.migrate(upto=1) == [1]
        assert await store.migrate() == list(range(2, store.schema_version_known + 1))
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_database_from_nothing_records_every_migration(backend, tmp_path):
    """The schema whole stands for every step: each is recorded, by name, so a later
    release finds the database at the last version and applies only what is newer."""
    schema = "rw_drift_whole"
    url = f"sqlite:///{tmp_path / 'whole.db'}" if backend == "sqlite" else f"{PG_BASE}?schema={schema}"
    if backend == "postgres":
        conn = await asyncpg.connect(PG_BASE)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    try:
        store = store_from_url(url)
        await store.open()
        try:
            assert await store.migrate() == [m.version for m in store.migrations]
            async with store._reading() as reading:
                rows = await reading.fetch("SELECT version, name FROM schema_versions ORDER BY version")
            assert [tuple(row) for row in rows] == [(m.version, m.name) for m in store.migrations]
        finally:
            await store.close()
        again = store_from_url(url)
        await again.open()
        try:
            assert await again.migrate() == []  # nothing left to apply
        finally:
            await again.close()
    finally:
        if backend == "postgres":
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await conn.close()


async def _pg_shape(conn: asyncpg.Connection, schema: str) -> dict[str, list]:
    columns = await conn.fetch(
        "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity"
        " FROM information_schema.columns WHERE table_schema = $1 AND table_name != 'schema_versions'"
        " ORDER BY table_name, ordinal_position", schema)
    indexes = await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1"
                               " AND tablename != 'schema_versions' ORDER BY indexname", schema)
    relations = await conn.fetch(
        "SELECT c.relname, c.relkind, c.relpersistence, c.reloptions FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1"
        " AND c.relname NOT LIKE 'schema_versions%' ORDER BY c.relname", schema)
    sequences = await conn.fetch(
        "SELECT sequencename, data_type::text, start_value, increment_by, cycle FROM pg_sequences"
        " WHERE schemaname = $1 ORDER BY sequencename", schema)
    checks = await conn.fetch(
        "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1 ORDER BY conname", schema)
    # A function's whole definition, the schema it names aside (its own, its search_path,
    # and its types' unless the reading session's search_path finds them: the fresh one's).
    functions = await conn.fetch(
        "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY p.proname", schema)
    return {
        "columns": [tuple(r) for r in columns],
        "functions": [(r[0], r[1].replace(f"{schema}.", "").replace(schema, "SCHEMA")) for r in functions],
        "indexes": [(r[0], r[1].replace(f"{schema}.", "")) for r in indexes],
        "constraints": [(r[0], r[1]) for r in checks if not r[0].startswith("schema_versions")],
        "relations": [tuple(r) for r in relations],
        "sequences": [tuple(r) for r in sequences],
    }


async def test_postgres_migrations_match_the_reference_schema():
    conn = await asyncpg.connect(PG_BASE)
    migrated, fresh = "rw_drift_migrated", "rw_drift_fresh"
    try:
        for schema in (migrated, fresh):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await _migrated_step_by_step(f"{PG_BASE}?schema={migrated}")
        await conn.execute(f'CREATE SCHEMA "{fresh}"')
        await conn.execute(f'SET search_path TO "{fresh}"')
        await conn.execute(schema_sql("runwright.store.postgres"))
        got, want = await _pg_shape(conn, migrated), await _pg_shape(conn, fresh)
        assert got == want and got["columns"] and got["functions"]
    finally:
        for schema in (migrated, fresh):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
