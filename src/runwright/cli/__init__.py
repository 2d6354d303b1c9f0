"""The `runwright` command: a thin face over the App (and, for `worker`, the engine's processes)."""

from . import questions as _questions  # noqa: F401 (registers its commands)
from . import sweep as _sweep  # noqa: F401 (registers its command)
from .main import cli, main

__all__ = ["cli", "main"]
