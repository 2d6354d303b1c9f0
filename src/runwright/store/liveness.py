"""Telling a dead worker from one that is reconnecting, for every store with a liveness
mark that lapses (PostgreSQL's session lock, Redis's key with a TTL).

A mark can go missing because the worker died, or because its connection was cut or the
database was away for a moment while the worker lives on and takes the mark again. A
rescuer therefore counts a worker dead only once its mark has stayed missing for
MISSING_GRACE_S by its own looks: a blip costs no takeover (and no recovery counted
toward max_recoveries), a death costs one more look.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["MISSING_GRACE_S", "Unmarked"]

# A reconnect on a reachable database takes milliseconds and a liveness refresh runs
# several times a second; rescuers look every 0.5 s, so in practice a mark must be
# missing at two looks in a row.
MISSING_GRACE_S = 0.3


class Unmarked:
    """What one rescuer has seen of missing marks: a worker is dead once its mark has
    been missing for MISSING_GRACE_S by this process's looks."""

    def __init__(self, grace_s: float = MISSING_GRACE_S) -> None:
        self._grace_s = grace_s
        self._since: dict[int, float] = {}

    def dead(self, missing: Iterable[int], now: float) -> list[int]:
        missing = set(missing)
        self._since = {wid: since for wid, since in self._since.items() if wid in missing}
        for wid in missing:
            self._since.setdefault(wid, now)
        return sorted(wid for wid, since in self._since.items() if now - since >= self._grace_s)
