"""Records of a run's history: journaled steps and events."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SNAPSHOT", "TERMINAL_EVENT_KINDS", "Event", "StepRecord", "ThreadEvent"]

# The journal name of a snapshot (`ctx.snapshot`): a resume reads the journal from the
# last done one on, not from the start.
SNAPSHOT = "snapshot"

# The kinds of the event that closes a run's log: a follower stops after one of these.
TERMINAL_EVENT_KINDS = frozenset({"succeeded", "failed", "dead", "cancelled", "interrupted"})


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One journaled step: what `ctx.step` (or sleep, or submit) recorded at a position."""

    run_id: int
    position: int
    name: str
    status: str  # "done" or "failed"
    result: str | None  # JSON, when done
    error: str | None  # JSON object, when failed
    fence: int
    created_at: float

    def value(self) -> Any:
        return None if self.result is None else json.loads(self.result)


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a run's gapless log (seq 1, 2, 3, ...)."""

    run_id: int
    seq: int
    kind: str
    data: dict[str, Any]
    at: float

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL_EVENT_KINDS


@dataclass(frozen=True, slots=True)
class ThreadEvent(Event):
    """An event of a thread's log: one of its runs' events, numbered `tseq` in the thread
    (1, 2, 3 ... without a gap; each run's events keep their order)."""

    tseq: int = 0
