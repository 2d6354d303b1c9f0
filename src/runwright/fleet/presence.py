"""Presence: who holds which slot, in which life, in which state, and how fresh.

The rules every transport shares, decided here once: which ordinal a new life takes,
how a row reads (a row past the freshness gate reads `stale`, whatever it last wrote),
when a row no longer counts (past its TTL: its life ended and its slot is free), and
when a life has departed (its slot is absent, a newer generation holds it, or its process
is known gone). Transports only store and return rows, with the store's own clock
(`Census.now`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Iterable

from ..store.liveness import gone_here

__all__ = ["Census", "Life", "Presence", "State", "choose_ordinal", "departed", "parse_name"]


class State(StrEnum):
    """What a process writes about itself."""

    READY = "ready"
    RESYNCING = "resyncing"  # boot or reconnect resync: not yet handling ops
    RECYCLING = "recycling"  # leaving gracefully, for its announced drain seconds


STALE = "stale"  # how a row past the freshness gate reads; never written


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
    """A row as a transport stores it; times are the store's clock (epoch seconds)."""

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

    def reads_as(self, row: Presence, stale_s: float) -> str:
        """The state a row reads: what it wrote, or `stale` past the freshness gate."""
        return STALE if self.now - row.heartbeat_at > stale_s else row.state.value

    def describe(self, stale_s: float) -> list[dict[str, Any]]:
        """The census as `runwright fleet workers` and `GET /fleet` show it."""
        return [{"name": r.name, "kind": r.kind, "generation": r.generation,
                 "state": self.reads_as(r, stale_s), "host": r.host, "pid": r.pid,
                 "heartbeat_age_s": round(max(0.0, self.now - r.heartbeat_at), 3),
                 "drain_s": r.drain_s, "age_s": round(max(0.0, self.now - r.claimed_at), 3)}
                for r in self.live()]


def choose_ordinal(census: Census, kind: str, tried: Iterable[int] = ()) -> int:
    """The lowest ordinal of `kind` no live row holds (and not one just lost to a race)."""
    taken = {r.ordinal for r in census.live() if r.kind == kind} | set(tried)
    ordinal = 1
    while ordinal in taken:
        ordinal += 1
    return ordinal


def departed(life: Life, census: Census) -> bool:
    """True when `life` has ended: its slot is absent, a newer generation holds it, or
    its process is gone. A process of this machine that runs no more (SIGKILLed, or it
    crashed) cannot answer or beat again, so its life ends at the census's next read,
    not when its TTL lapses; of another machine, only its slot tells (a cut connection
    and a death look alike from here: the TTL decides)."""
    holder = census.holder(life.kind, life.ordinal)
    return holder is None or holder.generation > life.generation or (
        holder.generation == life.generation and gone_here(holder.host, holder.pid))


def parse_name(name: str) -> tuple[str, int] | None:
    """(`kind`, ordinal) of a slot name such as `worker-2`; None if it is not one."""
    kind, _, number = name.rpartition("-")
    return (kind, int(number)) if kind and number.isdigit() and int(number) > 0 else None
