"""Presence: who holds which slot, in which life, in which state, and how fresh.

The rules every bus shares, decided here once: which ordinal a new life takes, how a row
reads (a row past the freshness gate reads `stale`, whatever it last wrote), and when a
life has departed (its slot is absent, a newer generation holds it, or its process is
known gone). The rows themselves (`State`, `Life`, `Presence`, `Census`) are the store's
bus's (`runwright.store._bus`), which stores and returns them with the store's own clock
(`Census.now`) and applies the one rule a claim needs: a row past its TTL no longer
counts (its life ended and its slot is free).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..store._bus import Census, Life, Presence, State
from ..store._liveness import gone_here

__all__ = ["Census", "Life", "Presence", "State", "choose_ordinal", "departed", "describe",
           "parse_name", "reads_as"]


STALE = "stale"  # how a row past the freshness gate reads; never written


def reads_as(census: Census, row: Presence, stale_s: float) -> str:
    """The state a row reads: what it wrote, or `stale` past the freshness gate."""
    return STALE if census.now - row.heartbeat_at > stale_s else row.state.value


def describe(census: Census, stale_s: float) -> list[dict[str, Any]]:
    """The census as `runwright fleet workers` and `GET /fleet` show it."""
    return [{"name": r.name, "kind": r.kind, "generation": r.generation,
             "state": reads_as(census, r, stale_s), "host": r.host, "pid": r.pid,
             "heartbeat_age_s": round(max(0.0, census.now - r.heartbeat_at), 3),
             "drain_s": r.drain_s, "age_s": round(max(0.0, census.now - r.claimed_at), 3)}
            for r in census.live()]


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
