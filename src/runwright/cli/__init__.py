"""The `runwright` command: a thin face over App, Worker and the store."""

from .main import cli, main

__all__ = ["cli", "main"]
