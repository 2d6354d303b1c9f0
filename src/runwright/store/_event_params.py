"""The store's parameters for events awaited by key (core._events): a wait's registration,
its close, a publish, a run's registrations."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EventPublishParams", "EventReclaimParams", "EventWaitCloseParams", "EventWaitListParams",
           "EventWaitParams"]


@dataclass(slots=True)
class EventWaitParams:
    """Register, fenced, the wait at (run, `position`) for event `name` whose data fits
    `match` (JSON object text), in the run's `tenant`. Registered once: a replay finds the
    registration as it stands (maybe delivered or closed), and changes nothing."""

    run_id: int
    fence: int
    position: int
    name: str
    match: str
    tenant: str | None = None
    now: float | None = None


@dataclass(slots=True)
class EventWaitCloseParams:
    """Close, fenced, the wait at (run, `position`) if it is still waiting (its timeout
    passed): no later publish delivers to it. A delivered one stays delivered."""

    run_id: int
    fence: int
    position: int
    now: float | None = None


@dataclass(slots=True)
class EventPublishParams:
    """Publish event `name` (`data`, JSON text) under `id` in `tenant` (None: the no-tenant
    runs only): kept by its id, and delivered as a signal (`event:<position>`, keyed
    `event:<id>:<position>`, sent by `by`) to every waiting registration of the tenant
    whose match fits, of a run not ended and with fewer than `max_pending` pending
    signals. The id
    published before: nothing is written, its first publish is returned (`existed`), or
    KeyConflict when it was published with another name or data."""

    id: str
    name: str
    data: str
    by: str | None = None
    tenant: str | None = None
    max_pending: int = 1000
    now: float | None = None


@dataclass(slots=True)
class EventWaitListParams:
    """A run's registered waits, by position."""

    run_id: int


@dataclass(slots=True)
class EventReclaimParams:
    """Forget the ids of events published more than `max_age_s` ago, judged by the store's
    clock (retention): a publish of such an id again is a new event."""

    max_age_s: float
    limit: int = 10_000
    now: float | None = None
