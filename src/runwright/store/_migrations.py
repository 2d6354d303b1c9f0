"""Numbered migrations: `NNNN_name.sql` files in each backend's `migrations/` folder, and
beside them `schema.sql`, the schema they build, whole (the drift test holds the two equal)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Migration", "load_migrations", "load_schema", "schema_sql"]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(package: str) -> list[Migration]:
    """Migrations of `package` in version order; a gap or a duplicate is a bug, so it raises."""
    found = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{package}: migrations must be numbered 1..n without gaps, got {versions}")
    return found


def load_schema(package: str, migrations: list[Migration]) -> Migration:
    """`package`'s schema.sql as one step to the last of `migrations`: what a database that
    holds nothing of ours is given, instead of every step since the first (which creates
    tables only to alter or drop them)."""
    return Migration(migrations[-1].version, "schema", schema_sql(package))


def schema_sql(package: str) -> str:
    """The text of `package`'s schema.sql."""
    return resources.files(package).joinpath("schema.sql").read_text()
