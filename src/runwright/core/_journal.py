"""Records of a run's history: journaled steps and events."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._payloads import load

__all__ = ["PATCH_PREFIX", "SNAPSHOT", "STATE_PREFIX", "TERMINAL_EVENT_KINDS", "Event", "StepRecord",
           "ThreadEvent", "check_patch_id", "published_state"]

# The journal name of a snapshot (`ctx.snapshot`): a resume reads the journal from the
# last done one on, not from the start.
SNAPSHOT = "snapshot"

# The journal names of a run's published state (`ctx.set_state(key, ...)`: "state:<key>").
STATE_PREFIX = "state:"

# The journal name of a patch's marker (`ctx.patched(id)`: "patch:<id>"): the run took the
# new path of that change.
PATCH_PREFIX = "patch:"
_PATCH_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def check_patch_id(patch_id: object) -> str:
    """A patch id: 1-100 letters, digits and `_ . -` (it names a journal entry)."""
    if not isinstance(patch_id, str) or not _PATCH_ID.match(patch_id):
        raise ValueError(f"a patch id is 1-100 letters, digits or `_.-`, got {patch_id!r}")
    return patch_id


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
        return None if self.result is None else load(self.result)


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


def published_state(journal: list[StepRecord]) -> dict[str, Any]:
    """A run's published state: each key's latest value (`ctx.set_state`), as its journal
    holds it, in position order."""
    state: dict[str, Any] = {}
    for record in sorted(journal, key=lambda r: r.position):
        if record.name.startswith(STATE_PREFIX) and record.status == "done":
            state[record.name.removeprefix(STATE_PREFIX)] = record.value()["value"]
    return state
