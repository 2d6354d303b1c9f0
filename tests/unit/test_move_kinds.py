"""What `runwright move` carries is declared once (move/_kinds.py): every table of both SQL
schemas is a kind it copies or one it leaves, with why; a table a migration adds must be
placed there, or a move would drop it without a word."""

from __future__ import annotations

import re

from runwright.move import KINDS, LEFT
from runwright.store._migrations import schema_sql
from runwright.store._moved import refusal, refusal_in, refusal_text


def _tables(package: str) -> set[str]:
    return set(re.findall(r"^CREATE TABLE (\w+)", schema_sql(package), re.MULTILINE))


def test_every_table_of_both_schemas_is_a_kind_or_left_with_a_reason() -> None:
    kinds = {kind.table for kind in KINDS}
    assert len(kinds) == len(KINDS)
    assert kinds.isdisjoint(LEFT)
    for package in ("runwright.store.sqlite", "runwright.store.postgres"):
        tables = _tables(package) | {"schema_versions"}
        assert tables - kinds - set(LEFT) == set(), package
    every = _tables("runwright.store.sqlite") | _tables("runwright.store.postgres") | {"schema_versions"}
    assert kinds | set(LEFT) == every  # nothing declared that no schema has


def test_each_kind_is_keyed_by_its_primary_key_on_both_backends() -> None:
    """The copy's order and its resume point are the key: it must be unique on both ends."""
    for package in ("runwright.store.sqlite", "runwright.store.postgres"):
        schema = schema_sql(package)
        for kind in KINDS:
            found = re.search(rf"^CREATE TABLE {kind.table} \((.*?)^\);", schema, re.MULTILINE | re.DOTALL)
            if found is None:
                continue  # run_keys: PostgreSQL's alone
            body = found[1]
            if len(kind.key) == 1:
                column = rf"^\s+{kind.key[0]}\s+\w+.*PRIMARY KEY"
                assert re.search(column, body, re.MULTILINE), (package, kind)
            else:
                assert f"PRIMARY KEY ({', '.join(kind.key)})" in body, (package, kind)


def test_a_seals_line_reads_back_as_the_error_it_stands_for() -> None:
    target = "postgresql://rw@db.example:5432/prod?schema=rw"
    moving = refusal_in(f"constraint failed: {refusal_text('moving', target, 42)}")
    assert moving is not None
    assert (moving.state, moving.target, moving.retry_after_s) == ("moving", target, 42)
    assert str(moving) == str(refusal("moving", target, 42)) and "retry in 42 s" in str(moving)
    moved = refusal_in(refusal_text("moved", target))
    assert moved is not None and moved.retry_after_s is None and target in str(moved)
    assert refusal_in("UNIQUE constraint failed: runs.id") is None
