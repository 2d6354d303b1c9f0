"""Parking: how a run gives its worker slot back while it waits (a durable timer, a child).

`Park` unwinds the task's function like an exception; the executor turns it into a
fenced give-back with a later run_at, so any worker resumes the run when it comes due,
by replaying its journal. It derives from BaseException so that a task's own
`except Exception:` cannot swallow it.
"""

from __future__ import annotations

__all__ = ["Park"]


class Park(BaseException):
    def __init__(self, until: float, reason: str) -> None:
        super().__init__(f"parked until {until} ({reason})")
        self.until = until
        self.reason = reason
