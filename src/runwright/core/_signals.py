"""Signals: messages the outside world sends a live run, which it reads when it waits.

A signal is kept with its run, numbered per run (`seq`, in the order sent), named, and
pending until the run takes it: `ctx.wait_signal(name)` takes the oldest pending signal of
that name into the journal position of the wait, fenced, so it is delivered once. A
signal sent before the run waits stays pending until it does; one sent to a parked run
wakes it. A pending signal may be withdrawn by its sender (an update given up on): it is
kept, marked, and no wait takes it. A signal may carry a `key`: sending the same key again (a retried request)
returns the signal already kept instead of adding a second one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

__all__ = ["MAX_PENDING_SIGNALS", "UPDATE_PREFIX", "Signal", "check_signal_name", "taken_outcome"]

# How many signals may wait, not yet taken, on one run. A sender past it is refused
# (SignalsFull) and nothing is kept: a run that never reads its signals cannot grow the
# database without bound.
MAX_PENDING_SIGNALS = 1000

# An update is a signal named "update:<name>" (and its handler's journal step too), whose
# result comes back to its sender as an `updated` event of the run's log.
UPDATE_PREFIX = "update:"

_NAME = re.compile(r"^[A-Za-z0-9_.:\-/]{1,200}$")


def check_signal_name(name: object) -> str:
    """A signal's name: 1-200 letters, digits and `_ . : - /` (it names journal steps)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(f"a signal name is 1-200 letters, digits or `_.:-/`, got {name!r}",
                           fields=[("name", "1-200 letters, digits or _.:-/")])
    return name


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal of a run. `position` is the journal position of the wait that took it
    (None while pending)."""

    run_id: int
    seq: int
    name: str
    payload: Any
    sent_at: float
    key: str | None = None
    sent_by: str | None = None
    position: int | None = None
    taken_at: float | None = None
    withdrawn_at: float | None = None  # its sender withdrew it before a wait took it

    @property
    def pending(self) -> bool:
        return self.position is None and self.withdrawn_at is None

    @classmethod
    def of_row(cls, run_id: Any, seq: Any, name: str, payload: str, sent_at: Any, key: str | None,
               sent_by: str | None, position: Any, taken_at: Any, withdrawn_at: Any = None) -> Signal:
        """From the stored columns (JSON text for the payload)."""
        return cls(int(run_id), int(seq), name, json.loads(payload), float(sent_at), key or None,
                   sent_by or None, None if position is None else int(position),
                   None if taken_at is None else float(taken_at),
                   None if withdrawn_at is None else float(withdrawn_at))

    def as_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self.seq, "name": self.name, "payload": self.payload,
                "sent_at": self.sent_at, "key": self.key, "sent_by": self.sent_by,
                "position": self.position, "taken_at": self.taken_at, "withdrawn_at": self.withdrawn_at}


def taken_outcome(signal: Signal) -> dict[str, Any]:
    """What a wait that took `signal` journals and returns: its payload, its seq and when it
    was sent. (PostgreSQL's take writes the same object in SQL: see its `TAKE`.)"""
    return {"payload": signal.payload, "seq": signal.seq, "sent_at": signal.sent_at}
