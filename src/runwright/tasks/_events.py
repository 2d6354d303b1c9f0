"""A task declared to start on an event (`@app.task(on_event=...)`), checked at registration."""

from __future__ import annotations

import inspect

from ..core._events import check_event_name
from ..errors import ConfigError, InvalidInput
from ._specs import TaskSpec

__all__ = ["check_starts_on"]


def check_starts_on(spec: TaskSpec) -> None:
    """The event's name is one, and the task takes the event's data as `event` (a run it
    starts is given nothing else): else a ConfigError at registration, not at a publish."""
    try:
        check_event_name(spec.on_event)
    except InvalidInput as exc:
        raise ConfigError(f"task {spec.name!r}: on_event: {exc}") from None
    params = spec.signature.parameters
    if "event" not in params and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        raise ConfigError(f"task {spec.name!r} starts on event {spec.on_event!r}: it takes the event's data "
                          f"as a parameter named `event`, which it has not")
    others = [name for name, p in params.items() if name != "event" and p.default is inspect.Parameter.empty
              and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if others:
        raise ConfigError(f"task {spec.name!r} starts on event {spec.on_event!r}: its run is given only "
                          f"`event`, but it requires {', '.join(others)}")
