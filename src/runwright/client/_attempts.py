"""A run's attempts, read back from its event log: when each started, on which worker,
how it ended and with what error. What `runwright show` prints for a dead letter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..core._journal import Event

__all__ = ["Attempt", "attempts_of"]

# Events that close an attempt, and the outcome each means.
ENDINGS = {
    "succeeded": "succeeded", "failed": "failed", "dead": "dead", "cancelled": "cancelled",
    "interrupted": "interrupted", "retrying": "retrying", "released": "given back",
    "parked": "parked", "recovered": "taken over",
}


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    fence: int
    worker: int | None
    started_at: float
    ended_at: float | None
    outcome: str | None  # None while it runs
    error: str | None


def attempts_of(events: Sequence[Event]) -> list[Attempt]:
    """One Attempt per claim (a `started` event), closed by the next ending event."""
    out: list[Attempt] = []
    current: Event | None = None
    for item in events:
        if item.kind == "started":
            if current is not None:
                out.append(_attempt(current, None))
            current = item
        elif item.kind in ENDINGS and current is not None:
            out.append(_attempt(current, item))
            current = None
    if current is not None:
        out.append(_attempt(current, None))
    return out


def _attempt(start: Event, end: Event | None) -> Attempt:
    data = start.data
    error = end.data.get("error") if end is not None else None
    return Attempt(data.get("attempt", 0), data.get("fence", 0), data.get("worker"), start.at,
                   end.at if end is not None else None,
                   ENDINGS[end.kind] if end is not None else None, error)
