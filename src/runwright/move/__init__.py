"""`runwright move`: a deployment moves from its store to another, with nothing lost.

Stop-the-world so far: the source is sealed (its tables refuse every write, in the
database), every kind is copied in key order, and the source is left as a tombstone that
names the target. Between SQLite and PostgreSQL, in both directions, and from either to
Redis (the kinds `_redis_end.KEPT` names; a source holding others is refused before the
seal). Redis is not a source yet. See `_kinds` for what moves and what does not.
"""

from __future__ import annotations

from ..store._urls import resolve_url as source_url  # --url, else RUNWRIGHT_URL, else the default
from ._kinds import KINDS, LEFT, Kind
from ._moving import Difference, KindCount, MoveReport, abandon, check, move, plan

__all__ = ["KINDS", "LEFT", "Difference", "Kind", "KindCount", "MoveReport", "abandon", "check", "move",
           "plan", "source_url"]
