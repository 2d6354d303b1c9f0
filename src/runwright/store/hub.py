"""In-process fan-out of change notifications.

Backends feed it (PostgreSQL from LISTEN/NOTIFY, SQLite from its data-version poll, both
from their own writes); waiters wake and re-read the store. A notification is only a hint
that something may have changed: the store stays the truth, so a lost or spurious wake-up
costs a read, never correctness.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

__all__ = ["CANCEL", "QUEUED", "Hub", "done_topic", "events_topic"]

QUEUED = "queued"  # runs became due (submitted, retried, rescued, released)
CANCEL = "cancel"  # a cancel was requested for a running run


def done_topic(run_id: int) -> str:
    return f"done:{run_id}"


class Hub:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        # True while the backend cannot deliver notifications (a listener reconnecting):
        # pollers shorten their interval instead of trusting silence.
        self.degraded = False

    @contextmanager
    def watch(self, *topics: str) -> Iterator[asyncio.Event]:
        """An event set whenever one of `topics` fires while the block is open."""
        event = asyncio.Event()
        for topic in topics:
            self._waiters[topic].add(event)
        try:
            yield event
        finally:
            for topic in topics:
                waiters = self._waiters.get(topic)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[topic]

    def fire(self, topic: str) -> None:
        for event in self._waiters.get(topic, ()):
            event.set()

    def fire_many(self, topics: Iterator[str] | list[str]) -> None:
        for topic in topics:
            self.fire(topic)

    def fire_all(self) -> None:
        """Wake everyone (a backend that only knows "something changed")."""
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    def has_waiters(self) -> bool:
        return bool(self._waiters)


def events_topic(run_id: int) -> str:
    return f"events:{run_id}"
