"""The sweeper: retention, run by one worker at a time under a lease, in bounded batches.

Every worker with a retention setting ticks; the one that holds the `sweep` lease (taken
or renewed at each tick, judged by the store's clock) does a pass, the others wait.
A holder that dies loses the lease when it lapses and another worker takes over: there
is no leader to lose silently. A pass removes at most `max_batches` batches, so a large
backlog is worked off over several ticks without holding the database for long.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from prometheus_client import Counter

from ..clock import Clock
from ..logs import event
from ..store.interface import Store
from ..store.params import LeaseTakeParams, RunReclaimed, RunReclaimParams

__all__ = ["LEASE", "RECLAIMED", "SWEEPS", "Sweeper", "SweepReport"]

LEASE = "sweep"
SWEEPS = Counter("runwright_sweep_passes_total", "Retention passes this process made.")
RECLAIMED = Counter("runwright_reclaimed_total", "What retention removed, by kind.", ["kind"])


@dataclass
class SweepReport:
    """What a pass removed (or, dry, would remove)."""

    runs: list[int] = field(default_factory=list)
    steps: int = 0
    events: int = 0

    def add(self, batch: RunReclaimed) -> None:
        self.runs += batch.run_ids
        self.steps += batch.steps
        self.events += batch.events


class Sweeper:
    def __init__(self, store: Store, clock: Clock, *, max_age_s: float, holder: str,
                 lease_s: float, batch: int = 1000, max_batches: int = 10) -> None:
        self._store = store
        self._clock = clock
        self.max_age_s = max_age_s
        self._holder = holder
        self._lease_s = lease_s
        self._batch = batch
        self._max_batches = max_batches

    async def tick(self) -> SweepReport | None:
        """A pass if this process holds the lease, else None."""
        if not await self._store.lease_take(LeaseTakeParams(LEASE, self._holder, self._lease_s)):
            return None
        report = await self.sweep()
        if report.runs:
            event(logging.INFO, "retention pass", runs=len(report.runs), steps=report.steps,
                  events=report.events)
        return report

    async def sweep(self, dry_run: bool = False) -> SweepReport:
        """One pass, whoever holds the lease (`runwright sweep` runs one on request)."""
        report = SweepReport()
        cut_off = self._clock.now() - self.max_age_s
        for _ in range(1 if dry_run else self._max_batches):
            batch = await self._store.run_reclaim(RunReclaimParams(cut_off, self._batch, dry_run))
            report.add(batch)
            if len(batch.run_ids) < self._batch:
                break
        if not dry_run:
            SWEEPS.inc()
            RECLAIMED.labels("runs").inc(len(report.runs))
            RECLAIMED.labels("steps").inc(report.steps)
            RECLAIMED.labels("events").inc(report.events)
        return report
