"""The `runwright` command: a thin face over the App (and, for `worker`, the engine's processes)."""

from .main import cli, main

__all__ = ["cli", "main"]
