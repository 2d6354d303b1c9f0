"""A broadcast's report: one row per process, and the rules that classify each.

Decided once for every bus:
- who is expected to answer: the live rows of the census taken when the op is sent that
  read `ready` (and are targeted). A row that reads `resyncing`, `recycling` or `stale`
  is reported as such at once: it is not handling ops, so waiting for it proves nothing;
  a row whose life has already departed (its process gone, its row not yet expired)
  reads `departed` at once;
- a reply counts only from the life it was sent to: a reply from another generation
  of the slot (a superseded life, or a newer one started since) is discarded;
- `departed`: the expected life ended before it answered (its slot absent, a newer
  generation holds it, or its process is gone: see `presence.departed`), found by
  re-reading the census once per heartbeat, not at the end of the window;
- at the end of the window: acknowledged but unfinished reads `timed_out`, silent reads
  `missing`. A failed propagation is never reported as success.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Collection

from ._presence import Census, Life, Presence, State, departed, reads_as

__all__ = ["Outcome", "ReportRow", "Tally"]


class Outcome(StrEnum):
    APPLIED = "applied"
    FAILED = "failed"  # the handler raised: `error` is its message
    MISSING = "missing"  # alive but silent by the end of the window
    DEPARTED = "departed"  # its life ended before it answered
    TIMED_OUT = "timed_out"  # acknowledged, not finished within the window
    RESYNCING = "resyncing"
    RECYCLING = "recycling"
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class ReportRow:
    """What one process did with one op."""

    name: str
    kind: str
    generation: int
    outcome: Outcome
    host: str
    pid: int
    error: str | None = None
    detail: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "generation": self.generation,
                "outcome": self.outcome.value, "host": self.host, "pid": self.pid,
                "error": self.error, "detail": self.detail}


@dataclass
class Tally:
    """The replies to one op, as they come; `close()` is the report."""

    census: Census
    stale_s: float
    targets: Collection[str] | None = None
    _expected: dict[str, Presence] = field(default_factory=dict)
    _final: dict[str, ReportRow] = field(default_factory=dict)
    _acked: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        for row in self.census.live():
            if self.targets is not None and row.name not in self.targets:
                continue
            state = reads_as(self.census, row, self.stale_s)
            if departed(row.life, self.census):  # its process is gone: its row outlives it
                self._settle(row, Outcome.DEPARTED)
            elif state == State.READY:
                self._expected[row.name] = row
            else:
                self._settle(row, Outcome(state))

    @property
    def expected(self) -> list[Life]:
        """The lives the op must reach."""
        return [row.life for row in self._expected.values()]

    @property
    def settled(self) -> bool:
        """Every expected process has answered or is gone."""
        return all(name in self._final for name in self._expected)

    def reply(self, name: str, generation: int, phase: str, error: str | None = None,
              detail: Any = None) -> None:
        """Take a reply: `ack`, `applied` or `failed` (others, and late ones, are ignored)."""
        row = self._expected.get(name)
        if row is None or row.generation != generation or name in self._final:
            return  # not sent to that life: a superseded or a newer one
        if phase == "ack":
            self._acked.add(name)
        elif phase in (Outcome.APPLIED, Outcome.FAILED):
            self._settle(row, Outcome(phase), error, detail)

    def recheck(self, census: Census) -> None:
        """Mark `departed` every expected life the census shows has ended."""
        for name, row in self._expected.items():
            if name not in self._final and departed(row.life, census):
                self._settle(row, Outcome.DEPARTED)

    def close(self) -> list[ReportRow]:
        """The report: the unanswered read `timed_out` (acknowledged) or `missing`."""
        for name, row in self._expected.items():
            if name not in self._final:
                self._settle(row, Outcome.TIMED_OUT if name in self._acked else Outcome.MISSING)
        return sorted(self._final.values(), key=lambda r: (r.kind, int(r.name.rpartition("-")[2])))

    def _settle(self, row: Presence, outcome: Outcome, error: str | None = None,
                detail: Any = None) -> None:
        self._final[row.name] = ReportRow(row.name, row.kind, row.generation, outcome, row.host,
                                          row.pid, error, detail)
