"""A rolling recycle, confirmed by reality.

One target at a time, in slot order: ask it to recycle, then watch the census until its
life is gone (slot absent, or a higher generation holds it) and the ready capacity of
its kind is back to what it was, both within the apply window. The roll stops at the
first target that does not converge, and says where and why; it never reports a target
as recycled on its word alone.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from ._broadcast import Outcome, ReportRow
from ._presence import Census, Presence, State, departed, reads_as
from ._settings import FleetSettings

__all__ = ["RecycleReport", "RecycleStep", "roll"]


@dataclass(frozen=True, slots=True)
class RecycleStep:
    name: str
    generation: int
    converged: bool
    seconds: float
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "generation": self.generation, "converged": self.converged,
                "seconds": round(self.seconds, 3), "why": self.why}


@dataclass(slots=True)
class RecycleReport:
    kind: str
    capacity: int  # ready processes of the kind when the roll began
    steps: list[RecycleStep] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(step.converged for step in self.steps)

    @property
    def stopped_at(self) -> str | None:
        return next((step.name for step in self.steps if not step.converged), None)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "capacity": self.capacity, "ok": self.ok,
                "stopped_at": self.stopped_at, "steps": [s.to_dict() for s in self.steps]}


class Fleet(Protocol):
    """What a roll needs of the fleet (`fleet.Fleet` is one)."""

    settings: FleetSettings

    async def census(self) -> Census: ...

    async def broadcast(self, op: str, payload: dict[str, Any] | None = None, *,
                        timeout_s: float | None = None,
                        targets: Sequence[str] | None = None) -> list[ReportRow]: ...


def ready_of(census: Census, kind: str, stale_s: float) -> list[Presence]:
    return [row for row in census.live()
            if row.kind == kind and reads_as(census, row, stale_s) == State.READY]


async def roll(fleet: Fleet, kind: str) -> RecycleReport:
    settings = fleet.settings
    targets = ready_of(await fleet.census(), kind, settings.stale_s)
    report = RecycleReport(kind, len(targets))
    for target in targets:
        step = await _recycle_one(fleet, target, report.capacity)
        report.steps.append(step)
        if not step.converged:
            break
    return report


async def _recycle_one(fleet: Fleet, target: Presence, capacity: int) -> RecycleStep:
    settings = fleet.settings
    began = time.monotonic()
    rows = await fleet.broadcast("recycle", {}, targets=[target.name],
                                 timeout_s=min(settings.broadcast_timeout_s, settings.apply_window_s))
    row = next((r for r in rows if r.name == target.name), None)
    if row is None or row.outcome is not Outcome.APPLIED:
        why = "not in the census any more" if row is None else f"the recycle op read {row.outcome}"
        return RecycleStep(target.name, target.generation, False, time.monotonic() - began,
                           f"{why}{': ' + row.error if row is not None and row.error else ''}")
    deadline = began + settings.apply_window_s
    gone, back = False, 0
    while time.monotonic() < deadline:
        census = await fleet.census()
        gone = gone or departed(target.life, census)
        back = len(ready_of(census, target.kind, settings.stale_s))
        if gone and back >= capacity:
            return RecycleStep(target.name, target.generation, True, time.monotonic() - began)
        await asyncio.sleep(settings.heartbeat_s / 2)
    why = (f"its life {target.name}@{target.generation} did not end" if not gone else
           f"ready {target.kind} capacity is {back} of {capacity}: no new life came up "
           f"(is the process under a supervisor that starts it again?)")
    return RecycleStep(target.name, target.generation, False, time.monotonic() - began,
                       f"{why} within RUNWRIGHT_FLEET_APPLY_WINDOW_S={settings.apply_window_s:g} s")
