"""How runs, steps, events and schedules are written into Redis values and read back.

A run is a hash, one field per column, an absent field being NULL. Script arguments
cannot be nil, so `NIL` (one NUL byte) stands for "no value". Floats are written with
`repr`, which round-trips a double exactly; the scripts write the times they compute
with %.17g for the same reason.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ...core._journal import Event, StepRecord
from ...core._questions import Question
from ...runs import Run, RunState

__all__ = [
    "CLAIM_READS",
    "NIL",
    "arg",
    "as_dict",
    "event_from_entry",
    "identity",
    "question_from_hash",
    "run_from_claim",
    "run_from_hash",
    "step_from_entry",
    "step_identity",
]

NIL = "\0"


def arg(value: Any) -> str:
    """One script argument: None as NIL, floats exactly, booleans as 0/1."""
    if value is None:
        return NIL
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def identity(tenant: str | None, name: str) -> str:
    """The unambiguous name of a key or a thread within its tenant ('' for none): JSON
    keeps the two parts apart whatever characters they hold."""
    return json.dumps([tenant or "", name])


def as_dict(flat: Sequence[str]) -> dict[str, str]:
    """HGETALL's flat list (as a script returns it) as a dict."""
    return dict(zip(flat[::2], flat[1::2]))


def _float(value: str | None) -> float | None:
    return None if value is None else float(value)


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


# What the claim reads of a due run, and answers with, by position: every field but the
# ones the claim itself writes the same for all the runs it takes (owner, lease_expires_at,
# started_at, cancel_requested, and finished_at, which a queued run never has). A field
# asked of a hash costs a scan of it (an absent one, all of it), so what the claim
# overwrites is not read first. The scripts get this list as CLAIM_READS (see
# _scripts.py), so it is written once. Not read either: `waiting` (stale once a run is
# claimed) and `forked_from` (absent on most runs, so asking for it would scan every claimed
# run's hash; an attempt does not need it): a claimed Run has None there.
CLAIM_READS = ("id", "key", "task", "queue", "priority", "state", "args", "attempt", "max_attempts",
               "fence", "run_at", "created_at", "timeout_s", "result", "error", "recoveries",
               "last_seq", "parent_id", "budget", "deadline_at", "thread", "interrupt", "tenant",
               "traceparent", "version", "major",  # major: read by the claim's Lua, not a Run field
               "limits")


def run_from_claim(v: Sequence[str | None], owner: int, started_at: float, lease: float) -> Run:
    """A claimed run from its CLAIM_READS values (None where a field is absent), as the
    claim left it, and what the claim wrote alike on every run it took."""
    return Run(
        int(v[0]), v[1], v[2], v[3], int(v[4]), RunState(v[5]), v[6], int(v[7]),  # type: ignore[arg-type]
        int(v[8]), int(v[9]), float(v[10]), float(v[11]),  # type: ignore[arg-type]
        _float(v[12]), owner, lease, started_at, None, v[13], v[14], int(v[15]),  # type: ignore[arg-type]
        False, int(v[16]), _int(v[17]), v[18],  # type: ignore[arg-type]
        _float(v[19]), v[20], v[21], v[22], v[23], v[24], limits=v[26],
    )


def run_from_hash(fields: dict[str, str] | Sequence[str]) -> Run:
    h = fields if isinstance(fields, dict) else as_dict(fields)
    return Run(
        int(h["id"]), h["key"], h["task"], h["queue"], int(h["priority"]), RunState(h["state"]),
        h["args"], int(h["attempt"]), int(h["max_attempts"]), int(h["fence"]),
        float(h["run_at"]), float(h["created_at"]), _float(h.get("timeout_s")),
        _int(h.get("owner")), _float(h.get("lease_expires_at")), _float(h.get("started_at")),
        _float(h.get("finished_at")), h.get("result"), h.get("error"), int(h["recoveries"]),
        h.get("cancel_requested") == "1", int(h["last_seq"]), _int(h.get("parent_id")),
        h.get("budget"), _float(h.get("deadline_at")), h.get("thread"), h.get("interrupt"),
        h.get("tenant"), h.get("traceparent"), h.get("version"), h.get("waiting"),
        h.get("pause_requested") == "1", _int(h.get("forked_from")), h.get("limits"),
    )


def event_from_entry(run_id: int, seq: int, entry: str) -> Event:
    """A log entry is JSON [kind, data JSON, at]; its seq is its list index + 1."""
    kind, data, at = json.loads(entry)
    return Event(run_id, seq, kind, json.loads(data), float(at))


def step_identity(fence: int, name: str, status: str, result: str | None, error: str | None) -> str:
    """What makes a journal entry itself: a write seen again with the same identity is our
    own (its reply lost), anything else at that position is another write."""
    return json.dumps([fence, name, status, result, error])


def step_from_entry(run_id: int, position: str, entry: str) -> StepRecord:
    held, created_at = entry.split("\n", 1)
    fence, name, status, result, error = json.loads(held)
    return StepRecord(run_id, int(position), name, status, result, error, fence, float(created_at))


def question_from_hash(run_id: int | str, position: int | str,
                       fields: dict[str, str] | Sequence[str]) -> Question:
    """A question from its hash q:<run>:<position> (a dict, or a script's flat list)."""
    h = fields if isinstance(fields, dict) else as_dict(fields)
    return Question.of_row(int(run_id), int(position), h["kind"], h["body"], float(h["asked_at"]),
                           h.get("answer"), h.get("answered_by"), _float(h.get("answered_at")))
