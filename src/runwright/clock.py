"""The one clock: what "now" is for stores, the engine and the App.

Every store operation's params object carries an optional `now`; `Clock.now(given)` is
that value when a caller (a test) brought one, else the clock's own reading. Tests inject
a clock of their own instead of patching time.
"""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["SYSTEM_CLOCK", "Clock"]


class Clock:
    """Epoch seconds from `source` (the system clock unless given)."""

    __slots__ = ("_source",)

    def __init__(self, source: Callable[[], float] = time.time) -> None:
        self._source = source

    def now(self, given: float | None = None) -> float:
        """`given` when it is set (an injected time), else this clock's reading."""
        return self._source() if given is None else given

    def __call__(self) -> float:
        return self._source()


SYSTEM_CLOCK = Clock()
