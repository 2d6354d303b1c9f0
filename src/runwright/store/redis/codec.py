"""How runs, steps, events and schedules are written into Redis values and read back.

A run is a hash, one field per column, an absent field being NULL. Script arguments
cannot be nil, so `NIL` (one NUL byte) stands for "no value". Floats are written with
`repr`, which round-trips a double exactly; the scripts write the times they compute
with %.17g for the same reason.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ...journal import Event, StepRecord
from ...questions import Question
from ...runs import Run, RunState

__all__ = [
    "NIL",
    "RUN_FIELDS",
    "arg",
    "as_dict",
    "event_from_entry",
    "identity",
    "question_from_hash",
    "run_from_hash",
    "run_from_values",
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


# The run hash's fields in Run's order: a script that answers with HMGET of these (the
# claim) sends values only, read back by position. The scripts get this list as
# RUN_FIELDS (see scripts.py), so it is written once.
RUN_FIELDS = ("id", "key", "task", "queue", "priority", "state", "args", "attempt", "max_attempts",
              "fence", "run_at", "created_at", "timeout_s", "owner", "lease_expires_at",
              "started_at", "finished_at", "result", "error", "recoveries", "cancel_requested",
              "last_seq", "parent_id", "budget", "deadline_at", "thread", "interrupt", "tenant",
              "traceparent", "version", "major")  # major: read by the claim's Lua, not a Run field


def run_from_values(v: Sequence[str | None]) -> Run:
    """A run from HMGET of RUN_FIELDS (None where a field is absent)."""
    return Run(
        int(v[0]), v[1], v[2], v[3], int(v[4]), RunState(v[5]), v[6], int(v[7]),  # type: ignore[arg-type]
        int(v[8]), int(v[9]), float(v[10]), float(v[11]),  # type: ignore[arg-type]
        _float(v[12]), _int(v[13]), _float(v[14]), _float(v[15]), _float(v[16]), v[17], v[18],
        int(v[19]), v[20] == "1", int(v[21]), _int(v[22]), v[23],  # type: ignore[arg-type]
        _float(v[24]), v[25], v[26], v[27], v[28], v[29],
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
        h.get("tenant"), h.get("traceparent"), h.get("version"),
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
