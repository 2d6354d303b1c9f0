"""The `runwright` command: a thin face over the App (and, for `worker`, the engine's processes)."""

from .fleet import fleet_cli
from .main import cli, main

cli.add_typer(fleet_cli, name="fleet")

__all__ = ["cli", "main"]
