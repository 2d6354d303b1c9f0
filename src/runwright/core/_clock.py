"""The one clock: what "now" is for stores, the engine and the App.

Every store operation's params object carries an optional `now`; `Clock.now(given)` is
that value when a caller (a test) brought one, else the clock's own reading. Tests inject
a clock of their own instead of patching time.

Whose clock: a store shared by machines (PostgreSQL, Redis) judges leases, due times and
deadlines by the database server's clock, inside the statement or script, so that clock
skew between machines changes nothing. Its default clock is a `StoreClock`: `judged()`
answers None ("read the database's clock there"), and its reading in Python (for the
times a process computes and writes: a retry's backoff, a sleep's wake-up, a deadline at
submission) is this machine's clock corrected by the offset last measured against the
server. SQLite is one machine: the system clock is the store's clock. An injected time
(`now=`) or an injected clock still overrides both.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Callable

__all__ = ["SYSTEM_CLOCK", "Clock", "OffsetClock", "StoreClock", "utc"]


def utc(epoch: float) -> str:
    """An instant as every face writes one (tables, `show`, logs): ISO 8601, UTC, to the
    second."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """Epoch seconds from `source` (the system clock unless given)."""

    __slots__ = ("_source",)

    def __init__(self, source: Callable[[], float] = time.time) -> None:
        self._source = source

    def now(self, given: float | None = None) -> float:
        """`given` when it is set (an injected time), else this clock's reading."""
        return self() if given is None else given

    def judged(self, given: float | None = None) -> float | None:
        """The time a store's statement judges by: `given`, else this clock's reading.
        None means "the database's own clock, read inside the statement" (StoreClock)."""
        return self.now(given)

    def __call__(self) -> float:
        return self._source()


class OffsetClock(Clock):
    """This machine's clock moved by `offset_s`: a server's as measured (StoreClock), or a
    test's that skips ahead (runwright.testing.SkippingClock)."""

    __slots__ = ("offset_s",)

    def __init__(self) -> None:
        super().__init__(time.time)
        self.offset_s = 0.0

    def __call__(self) -> float:
        return self._source() + self.offset_s


class StoreClock(OffsetClock):
    """A database server's clock, as one process sees it (see the module docstring).

    `observe` records one reading of the server's clock; the offset is how far this
    machine's clock is from it, as if the reading was taken when its reply arrived: the
    lowest offset the round trip allows, never one ahead of the server. A run submitted
    for now is then due when its insert reaches the server. Taken halfway (the middle of
    the bounds), a round trip slowed on its way out (a loaded machine: seen at 300 ms) put
    this clock ahead by up to half of it, and a claim right after the submission found
    the run not yet due. The price: a time written from here is early by at most the
    round trip (milliseconds), and early is what "due" forgives.
    """

    __slots__ = ()

    def judged(self, given: float | None = None) -> float | None:
        return given

    def observe(self, server_s: float, received_s: float) -> None:
        """Learn the offset from `server_s`, read before its reply arrived at `received_s`
        (this machine's clock, not corrected)."""
        self.offset_s = server_s - received_s


SYSTEM_CLOCK = Clock()
