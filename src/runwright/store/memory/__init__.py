"""The in-process store: `memory://`."""

from .store import MemoryStore

__all__ = ["MemoryStore"]
