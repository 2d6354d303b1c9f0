"""The in-process store: `memory://`."""

from ._store import MemoryStore

__all__ = ["MemoryStore"]
