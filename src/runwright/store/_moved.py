"""What `runwright move` leaves in a SQL store, and how the store tells its callers.

A move keeps its state in one row of `leases` (no migration: the table exists since
retention, and a row that never lapses is never taken by another holder), named MARK:
its holder is JSON {"state", "target", "retry_s"}. On the source "moving" (sealed), then
"moved" (the tombstone); on the target "receiving" until the copy is done.

The seal itself is triggers on every table, made by the move (runwright.move): a write
raises, in the database, the line `refusal_text` makes, whichever process and code
version sent it. The store turns that line back into DeploymentMoved where its errors
pass (`refusal_in`), and reads the mark once when it opens (`refusal_at_open`): nothing
on any hot path, so a store that never moved pays nothing.
"""

from __future__ import annotations

import json
import re

from ..errors import DeploymentMoved

__all__ = ["MARK", "NEVER", "mark_holder", "refusal", "refusal_in", "refusal_of_mark", "refusal_text"]

MARK = "runwright.move"
NEVER = 1e300  # a mark's lease never lapses: no other holder takes it

_PREFIX = "runwright-move: "
_LINE = re.compile(r"runwright-move: (moving|moved|receiving) (\S+) (\d+)")


def mark_holder(state: str, target: str, retry_s: int = 0) -> str:
    return json.dumps({"state": state, "target": target, "retry_s": retry_s})


def refusal_text(state: str, target: str, retry_s: int = 0) -> str:
    """The line a sealed table's trigger raises: machine-readable first (refusal_in reads
    it), then the words a person reads in a log of an old process."""
    return f"{_PREFIX}{state} {target} {retry_s} | {_words(state, target, retry_s)}"


def refusal(state: str, target: str, retry_s: int = 0) -> DeploymentMoved:
    return DeploymentMoved(_words(state, target, retry_s), state=state, target=target,
                           retry_after_s=retry_s if state == "moving" else None)


def refusal_in(message: str) -> DeploymentMoved | None:
    """The DeploymentMoved a database error's message carries, if it is a seal's."""
    found = _LINE.search(message)
    if found is None:
        return None
    return refusal(found[1], found[2], int(found[3]))


def refusal_of_mark(holder: str | None) -> DeploymentMoved | None:
    """The DeploymentMoved a store whose mark holds `holder` answers at open (None: none)."""
    if holder is None:
        return None
    mark = json.loads(holder)
    return refusal(mark["state"], mark["target"], int(mark.get("retry_s", 0)))


def _words(state: str, target: str, retry_s: int) -> str:
    if state == "moving":
        return f"this deployment is moving to {target}, retry in {retry_s} s (there, once it is done)"
    if state == "moved":
        return (f"this deployment moved to {target}: this store is its tombstone and takes no write;"
                f" use that URL (RUNWRIGHT_URL or --url)")
    return (f"a move into this store from {target} is under way: start processes here once"
            f" `runwright move` is done")
