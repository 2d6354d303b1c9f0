"""The rulebook's part for events awaited by key: a publish of an id published before."""

from __future__ import annotations

import json
from typing import Any

from ..core._events import EventPublished
from ..errors import KeyConflict
from ._event_params import EventPublishParams

__all__ = ["republished"]


def republished(params: EventPublishParams, name: str, data: str, woken: list[Any],
                full: list[Any]) -> EventPublished:
    """The answer to a publish whose id was published before: the first publish's outcome
    (nothing is delivered again), or KeyConflict when the id came with another name or data."""
    if name != params.name or json.loads(data) != json.loads(params.data):
        raise KeyConflict(params.id, 0, ["event"],
                          f"event id {params.id!r} was published before with another name or data")
    return EventPublished(params.id, name, [int(i) for i in woken], [int(i) for i in full], existed=True)
