"""What a move carries, declared once: each kind of state is a table, copied by its key.

Every table of the SQL schemas is either a KIND (copied, in key order, so that the
target's last key is how far a copy got) or LEFT (not copied, and why). A test holds
this against both schema.sql files, so a table added by a migration must be placed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "LEFT", "Kind", "given_back"]


@dataclass(frozen=True, slots=True)
class Kind:
    table: str
    key: tuple[str, ...]  # the primary key: the copy's order, and how far it got
    what: str  # in words, for the progress and the report


KINDS = [
    Kind("runs", ("id",), "runs (every state, ids, keys, fences, attempts, leases)"),
    Kind("steps", ("run_id", "position"), "journals"),
    Kind("events", ("run_id", "seq"), "event logs, with their sequence numbers"),
    Kind("threads", ("tenant", "id"), "threads and tombstones, with incarnations"),
    Kind("thread_messages", ("tenant", "thread_id", "run_id", "idx"), "thread histories"),
    Kind("thread_events", ("tenant", "thread_id", "tseq"), "threads' event numbering"),
    Kind("questions", ("run_id", "position"), "questions and answers"),
    Kind("signals", ("run_id", "seq"), "signals"),
    Kind("event_waits", ("run_id", "position"), "waits for published events"),
    Kind("published_events", ("tenant", "id"), "published events"),
    Kind("schedules", ("name",), "schedules, with their next fire times"),
    Kind("reclaimed", ("lo",), "retention's marks (reclaimed run ids)"),
    Kind("rate_buckets", ("name",), "rate limit buckets"),
    Kind("fleet_paused_queues", ("root", "queue"), "queues paused fleet-wide"),
    Kind("limit_overrides", ("target",), "concurrency limit overrides"),
    Kind("flow_keys", ("slot",), "flow control keys"),
    Kind("rate_spent", ("slot", "until", "run_id"), "rate spends in their windows"),
    # PostgreSQL's index of run keys beside runs: from PostgreSQL it is copied, into it
    # from SQLite (whose unique index is on runs) it is made from the runs copied.
    Kind("run_keys", ("tenant", "key"), "run keys"),
]

# Not copied, nor sealed: the liveness of the source's processes, which do not move with
# the data (they heartbeat and leave the fleet as they stop).
LEFT = {
    "workers": "the source's worker registrations: its processes re-register on the target"
               " (the target's worker ids start past the source's)",
    "fleet_slots": "the source's fleet slots: held by live processes, taken again on the target",
    "fleet_messages": "the source's polled fleet messages: delivered or pruned there",
    "leases": "named leases (the retention sweep's) lapse by themselves; a move's own mark lives here",
    "schema_versions": "the target is migrated by its own store",
}


def given_back(columns: list[str], row: list[Any]) -> list[Any]:
    """A run that was running at the seal reaches the target with no owner: its lease
    ended, so the target's rescuer takes it back at once and a worker resumes it from its
    journal (a completed step is never run again). The source's row stays as it was."""
    state = columns.index("state")
    if row[state] != "running":
        return row
    row = list(row)
    row[columns.index("owner")] = None
    if "lingering" in columns:  # PostgreSQL: a wait in the owner's memory, gone with it
        row[columns.index("lingering")] = None
    return row
