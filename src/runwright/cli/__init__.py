"""The `runwright` command: a thin face over the App (and, for `worker`, the engine's processes)."""

from . import questions as _questions  # noqa: F401 (registers its commands)
from . import sweep as _sweep  # noqa: F401 (registers its command)
from .fleet import fleet_cli
from .main import cli, main

cli.add_typer(fleet_cli, name="fleet")

__all__ = ["cli", "main"]
