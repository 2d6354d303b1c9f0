"""Events awaited by key: a run waits for an event by name and a match on its data
(`ctx.wait_event`); a publisher (`app.publish_event`) delivers it to every waiting run whose
match fits, and starts the runs of the tasks declared to start on it.

A delivery IS a signal to the waiting run (core._signals): kept with the run, woken by
the send, taken once into the journal, capped, removed by retention. What events add is
the registry of waits a publisher finds by name: a wait registers (run, journal position,
name, match) before it waits, and its registration stops matching once it is delivered,
closed (its timeout) or its run ended. The delivered signal is named after the wait's
position (`event:<position>`) and keyed by the event's id and that position
(`event:<id>:<position>`), so a wait reads exactly its own delivery; an event id is
published once (a publish of it again delivers nothing).

An event reaches only the waits registered before it is published: nothing of it is
kept for a wait that comes later (as DBOS's get_event would; an event here is a
notification, not a state).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import InvalidInput
from . import _inputs as inputs
from ._signals import check_signal_name

__all__ = ["MAX_EVENT_ID_CHARS", "MAX_MATCH_FIELDS", "EventPublished", "EventWait", "check_event_id",
           "check_event_name", "check_match", "delivery_key", "event_id_or_new", "matches",
           "wait_signal_name"]

MAX_EVENT_ID_CHARS = 200
# A match is a handful of fields: one is the usual (the document, the order...).
MAX_MATCH_FIELDS = 32


def check_event_name(name: object) -> str:
    """An event's name: a signal's (1-200 letters, digits and `_ . : - /`)."""
    try:
        return check_signal_name(name)
    except InvalidInput:
        raise InvalidInput(f"an event name is 1-200 letters, digits or `_.:-/`, got {name!r}",
                           fields=[("name", "1-200 letters, digits or _.:-/")]) from None


def check_event_id(value: object) -> str:
    """An event's id: a name of at most MAX_EVENT_ID_CHARS (it keys the runs it starts)."""
    return inputs.name(value, "event id", MAX_EVENT_ID_CHARS)


def event_id_or_new(value: object | None) -> str:
    return uuid.uuid4().hex if value is None else check_event_id(value)


def check_match(match: Mapping[str, Any] | None) -> dict[str, Any]:
    """A wait's match: field path -> JSON value. A path is a top-level field of the
    event's data (`"doc_id"`) or a dotted path into nested objects (`"doc.id"`); the
    event fits when every path is there with an equal value."""
    if match is None:
        return {}
    if not isinstance(match, Mapping):
        raise InvalidInput(f"match is an object of field -> value, got {type(match).__name__}")
    if len(match) > MAX_MATCH_FIELDS:
        raise InvalidInput(f"match has {len(match)} fields; at most {MAX_MATCH_FIELDS}")
    for path, value in match.items():
        if (not isinstance(path, str) or not path or len(path) > 200
                or not all(path.split("."))):
            raise InvalidInput(f"a match field is a name or a dotted path (a.b), got {path!r}")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidInput(f"match field {path!r}: the value is not JSON ({value!r})") from None
    return dict(match)


def matches(match: Mapping[str, Any], data: Any) -> bool:
    """Whether the event's data fits the match (every path there, each value equal)."""
    for path, wanted in match.items():
        found: Any = data
        for part in path.split("."):
            if not isinstance(found, dict) or part not in found:
                return False
            found = found[part]
        if not _same(found, wanted):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1 (Python's == says it is), 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def wait_signal_name(position: int) -> str:
    """The name of the signal that delivers an event to the wait at `position`."""
    return f"event:{position}"


def delivery_key(event_id: str, position: int) -> str:
    """The key of a delivered signal (a run's keys are unique): the event and the wait."""
    return f"event:{event_id}:{position}"


@dataclass(frozen=True)
class EventPublished:
    """What a publish did: the runs whose waits it woke (each delivered once), those it
    could not deliver to (`full`: as many pending signals as a run may keep), and the
    runs it started (`started`: new ones only). `existed`: the id was published before;
    nothing was delivered again, and `woken`/`full` are that first publish's."""

    id: str
    name: str
    woken: list[int] = field(default_factory=list)
    full: list[int] = field(default_factory=list)
    started: list[int] = field(default_factory=list)
    existed: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "woken": self.woken, "full": self.full,
                "started": self.started, "existed": self.existed}


@dataclass(frozen=True)
class EventWait:
    """A run's registered wait for an event: `state` "waiting" (a publish of `name` whose
    data fits `match` delivers to it), "delivered" (`event_id`'s delivery is its signal) or
    "closed" (its timeout passed). A wait of an ended run matches nothing."""

    run_id: int
    position: int
    name: str
    match: dict[str, Any]
    tenant: str | None
    registered_at: float
    state: str = "waiting"
    event_id: str | None = None
