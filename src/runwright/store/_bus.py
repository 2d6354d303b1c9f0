"""The fleet's bus: the one interface every backend's bus provides, the rows it keeps
and the messages it carries.

`Store.bus(root)` gives a bus of the backend's own connections (`store/<backend>/bus.py`:
postgres LISTEN/NOTIFY, redis pub/sub, sqlite a polled table; memory is SQLite's). A bus
stores presence rows (with the store's clock), claims a slot only if no live row holds it
(atomically, bumping the slot's generation), and carries messages to every process of its
root. It decides nothing else: the fleet's rules are in `runwright.fleet` (`presence`,
`broadcast`). (The durable set of paused queues is the store's, which its claims read.)

A row is live while it is within its TTL: past it, its life ended and its slot is free.
That one rule is the bus's own (each backend's claim applies it atomically, and
`Census.live` reads it in Python); a row's freshness (`stale`) is the fleet's.

Messages are small JSON objects on one channel per root: an op
(`{"type": "op", "id", "op", "payload", "targets"}`) and its replies
(`{"type": "reply", "id", "name", "generation", "phase", "error", "detail"}`).
Delivery is a hint, like every notification of runwright: a lost message shows in the
report (`missing`), never as a success.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Mapping, Protocol

from ..errors import InvalidInput

__all__ = ["MAX_MESSAGE_BYTES", "Bus", "Census", "Deliver", "Hearing", "Life", "Presence", "State",
           "Writing", "decode", "encode"]

# PostgreSQL's NOTIFY takes at most 8000 bytes; every bus keeps to it, so that an op that
# works on one works on all.
MAX_MESSAGE_BYTES = 7900


class State(StrEnum):
    """What a process writes about itself."""

    READY = "ready"
    RESYNCING = "resyncing"  # boot or reconnect resync: not yet handling ops
    RECYCLING = "recycling"  # leaving gracefully, for its announced drain seconds


@dataclass(frozen=True, slots=True)
class Life:
    """One life of a slot: `worker-2` at generation 5."""

    kind: str
    ordinal: int
    generation: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.ordinal}"


@dataclass(frozen=True, slots=True)
class Presence:
    """A row as a bus stores it; times are the store's clock (epoch seconds)."""

    kind: str
    ordinal: int
    generation: int
    state: State
    host: str
    pid: int
    drain_s: float
    claimed_at: float
    heartbeat_at: float
    expires_at: float

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.ordinal}"

    @property
    def life(self) -> Life:
        return Life(self.kind, self.ordinal, self.generation)


@dataclass(frozen=True, slots=True)
class Census:
    """The rows of a fleet at one instant of the store's clock, `now`."""

    rows: list[Presence]
    now: float

    def live(self) -> list[Presence]:
        """Rows within their TTL, by kind and ordinal (a row past it is a life that ended)."""
        return sorted((r for r in self.rows if r.expires_at > self.now),
                      key=lambda r: (r.kind, r.ordinal))

    def holder(self, kind: str, ordinal: int) -> Presence | None:
        return next((r for r in self.live() if r.kind == kind and r.ordinal == ordinal), None)


Deliver = Callable[[dict[str, Any]], None]
# Told False when the subscription dropped (messages sent meanwhile are lost) and True
# when it is taken again: the process resyncs in between, reading `resyncing`.
Hearing = Callable[[bool], None]


@dataclass(frozen=True, slots=True)
class Writing:
    """What a process writes into its row: its state, where it is, and its drain."""

    state: State
    host: str
    pid: int
    drain_s: float
    ttl_s: float


class Bus(Protocol):
    root: str  # `{namespace}:v{major}`

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def census(self) -> Census:
        """Every row of the root (live or not), with the store's clock."""

    async def slot_claim(self, kind: str, ordinal: int, writing: Writing) -> int | None:
        """Take slot (kind, ordinal) if no live row holds it, bumping its generation:
        the new generation, or None when a live row holds it (a race lost)."""

    async def presence_refresh(self, life: Life, writing: Writing) -> bool:
        """Rewrite the row of `life` and extend its TTL; False when that life has ended
        (its row expired or a newer generation holds the slot)."""

    async def presence_delete(self, life: Life) -> None:
        """Remove the row of `life` (a no-op if another life holds the slot)."""

    async def publish(self, message: Mapping[str, Any]) -> None: ...

    async def subscribe(self, deliver: Deliver, hearing: Hearing) -> None:
        """Deliver every message of the root to `deliver` from now on (idempotent), and
        tell `hearing` when a subscription that may lose messages drops and comes back."""


def encode(message: Mapping[str, Any]) -> str:
    """JSON of a message; InvalidInput if it is larger than any bus carries."""
    try:
        text = json.dumps(message, separators=(",", ":"), default=str)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a fleet payload must be JSON: {exc}") from None
    if len(text.encode()) > MAX_MESSAGE_BYTES:
        raise InvalidInput(f"a fleet message is at most {MAX_MESSAGE_BYTES} bytes of JSON, "
                           f"this one is {len(text.encode())}")
    return text


def decode(text: str | bytes) -> dict[str, Any] | None:
    """The message, or None for anything that is not one of ours."""
    try:
        message = json.loads(text)
    except (TypeError, ValueError):
        return None
    return message if isinstance(message, dict) and message.get("type") in ("op", "reply") else None
