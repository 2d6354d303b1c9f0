"""A process-local cache that the fleet can evict by prefix (`evict-cache`).

The fleet's answer to "which cache?": the one the user's code keeps here, by name
(`app.cache.set("prices:eu", table)`), so that a broadcast `evict-cache {"prefix":
"prices:"}` reaches what the code actually reads. Evicting is idempotent: a second
broadcast finds nothing and reports 0 evicted.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Cache"]


class Cache:
    """Named values of this process; thread-safe (plain tasks run in threads)."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"a cache key is a string, got {key!r}")
        with self._lock:
            self._values[key] = value

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._values

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._values)

    def evict(self, prefix: str = "") -> int:
        """Drop every key that starts with `prefix` ("" drops all); how many were dropped."""
        with self._lock:
            doomed = [key for key in self._values if key.startswith(prefix)]
            for key in doomed:
                del self._values[key]
            return len(doomed)
