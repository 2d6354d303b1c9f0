"""The sweeper: retention, run by one worker at a time under a lease, in bounded batches.

Every worker with a retention setting ticks; the one that holds the `sweep` lease (taken
or renewed at each tick, judged by the store's clock) does a pass, the others wait.
A holder that dies loses the lease when it lapses and another worker takes over: there
is no leader to lose silently. A pass removes at most `max_batches` batches of each
kind, so a large backlog is worked off over several ticks without holding the database
for long. What a pass does is set by `Retention`: each bound unset means keep. Ages are judged
by the store's clock inside its statements (scripts), against the times the rows carry:
the pass sends an age, never a cut-off reckoned on this worker's clock.

When the codecs it is given name a blob store (offloaded payloads, core._blobs), a pass that removed
anything, and the first pass and one a grace period after the last, also collect the blobs
no row names any more and older than the grace: those of the runs, events and messages
removed, and any a crash left behind (written, its row never committed; or its row removed
by a pass that stopped before collecting). A blob a surviving row names is never deleted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, TypeVar

from prometheus_client import Counter

from ..core._blobs import BlobStore, collectable, install_blobs
from ..core._clock import Clock
from ..core._payloads import Codecs
from ..errors import ConfigError
from ..observe._logs import event
from ..store._event_params import EventReclaimParams
from ..store._interface import Store
from ..store._params import (
    EventsTrimmed,
    EventTrimParams,
    FlowKeyReclaimParams,
    LeaseTakeParams,
    RunReclaimed,
    RunReclaimParams,
    ThreadMessagesTrimmed,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
    TombstonesReclaimed,
)
from ._crashpoints import crash_point

__all__ = ["LEASE", "RECLAIMED", "SWEEPS", "Retention", "Sweeper", "SweepReport"]

LEASE = "sweep"
SWEEPS = Counter("runwright_sweep_passes_total", "Retention passes this process made.")
RECLAIMED = Counter("runwright_reclaimed_total", "What retention removed, by kind "
                    "(runs, steps, events, tombstones, messages, blobs).", ["kind"])

Batch = TypeVar("Batch", RunReclaimed, EventsTrimmed, TombstonesReclaimed, ThreadMessagesTrimmed, int)


@dataclass(frozen=True, slots=True)
class Retention:
    """What retention keeps. Every bound defaults to None: keep everything of that kind."""

    # Ended runs older than this (since they ended, by the store's clock) are removed with
    # their journal, log and questions; so are the ids of events published longer ago
    # (publish_event's idempotency lasts this long). Defaults to None.
    max_age_s: float | None = None
    # A run's log keeps its last this many events, behind a `trimmed` marker that names
    # the first seq kept (open runs too: a long agent run stays bounded). Defaults to None.
    max_events: int | None = None
    # A thread keeps its newest this many runs: of the older ones, the ended go as old
    # runs go (a reader is told they expired); its history stays. Defaults to None.
    thread_max_runs: int | None = None
    # The tombstones of threads deleted longer ago than this (by the store's clock) are
    # removed: the name may then name a new thread, of a larger incarnation, and a
    # reader of the old one is still told ThreadDeleted. A thread whose delete left an
    # open run keeps its tombstone until the run is over. Defaults to None: keep them,
    # and every deleted name stays taken.
    tombstone_age_s: float | None = None
    # A thread's history keeps its newest this many messages; the older go, except the
    # messages of a run still open (queued or running), which stay whatever their age
    # until the run ends (its resume reads them). Defaults to None: keep every message.
    thread_max_messages: int | None = None

    def __post_init__(self) -> None:
        if self.max_age_s is not None and not self.max_age_s > 0:
            raise ConfigError(f"retention max_age_s must be > 0 (or None: keep), got {self.max_age_s}")
        if self.max_events is not None and not self.max_events >= 1:
            raise ConfigError(f"retention max_events must be >= 1 (or None: keep), got {self.max_events}")
        if self.thread_max_runs is not None and not self.thread_max_runs >= 1:
            raise ConfigError(f"retention thread_max_runs must be >= 1 (or None: keep), "
                              f"got {self.thread_max_runs}")

        if self.tombstone_age_s is not None and not self.tombstone_age_s > 0:
            raise ConfigError(f"retention tombstone_age_s must be > 0 (or None: keep), "
                              f"got {self.tombstone_age_s}")
        if self.thread_max_messages is not None and not self.thread_max_messages >= 1:
            raise ConfigError(f"retention thread_max_messages must be >= 1 (or None: keep), "
                              f"got {self.thread_max_messages}")

    @property
    def keeps_everything(self) -> bool:
        return all(bound is None for bound in (self.max_age_s, self.max_events, self.thread_max_runs,
                                               self.tombstone_age_s, self.thread_max_messages))


@dataclass
class SweepReport:
    """What a pass removed (or, dry, would remove)."""

    runs: list[int] = field(default_factory=list)
    steps: int = 0
    events: int = 0
    capped_runs: list[int] = field(default_factory=list)  # of `runs`, those a thread cap took
    trimmed_runs: list[int] = field(default_factory=list)  # runs whose log was trimmed
    trimmed_events: int = 0
    tombstones: list[tuple[str | None, str]] = field(default_factory=list)  # (tenant, thread)
    message_threads: int = 0  # threads whose history was trimmed (a thread once a batch)
    messages: int = 0
    blobs: int = 0  # offloaded payloads' blobs no row names any more, collected
    flow_keys: int = 0  # records of flow control keys no decision needs any more

    def add(self, batch: RunReclaimed) -> None:
        self.runs += batch.run_ids
        self.steps += batch.steps
        self.events += batch.events

    def add_capped(self, batch: RunReclaimed) -> None:
        self.add(batch)
        self.capped_runs += batch.run_ids

    def add_trim(self, batch: EventsTrimmed) -> None:
        self.trimmed_runs += batch.run_ids
        self.trimmed_events += batch.events

    def add_tombstones(self, batch: TombstonesReclaimed) -> None:
        self.tombstones += batch.threads

    def add_flow_keys(self, removed: int) -> None:
        self.flow_keys += removed

    def add_messages(self, batch: ThreadMessagesTrimmed) -> None:
        self.message_threads += len(batch.threads)
        self.messages += batch.messages

    @property
    def removed_anything(self) -> bool:
        return bool(self.runs or self.trimmed_runs or self.tombstones or self.messages or self.blobs)

    def as_dict(self) -> dict[str, object]:
        return {"runs": len(self.runs), "run_ids": self.runs, "steps": self.steps, "events": self.events,
                "capped_runs": len(self.capped_runs), "trimmed_runs": len(self.trimmed_runs),
                "trimmed_events": self.trimmed_events, "tombstones": len(self.tombstones),
                "message_threads": self.message_threads, "messages": self.messages, "blobs": self.blobs,
                "flow_keys": self.flow_keys}


class Sweeper:
    def __init__(self, store: Store, clock: Clock, retention: Retention, *, holder: str,
                 lease_s: float, batch: int = 1000, max_batches: int = 10,
                 codecs: Codecs | None = None) -> None:
        self._store = store
        self._clock = clock
        self.retention = retention
        self._holder = holder
        self._lease_s = lease_s
        self._batch = batch
        self._max_batches = max_batches
        self._renew = False
        self._collected_at: float | None = None  # monotonic time of the last blob collection
        # The deployment's blob store (its codecs'), whose blobs no row names are collected.
        self._blobs = install_blobs(codecs.blobs) if codecs is not None else None
        self._blob_grace_s = codecs.blob_grace_s if codecs is not None else 0.0

    async def tick(self) -> SweepReport | None:
        """A pass if this process holds the lease, else None."""
        if not await self._holds_lease():
            return None
        report = await self.sweep(renew=True)
        if report.removed_anything or report.flow_keys:
            event(logging.INFO, "retention pass", runs=len(report.runs), steps=report.steps,
                  events=report.events, trimmed_runs=len(report.trimmed_runs),
                  trimmed_events=report.trimmed_events, tombstones=len(report.tombstones),
                  messages=report.messages, flow_keys=report.flow_keys)
        return report

    async def _holds_lease(self) -> bool:
        return await self._store.lease_take(LeaseTakeParams(LEASE, self._holder, self._lease_s))

    async def sweep(self, dry_run: bool = False, renew: bool = False) -> SweepReport:
        """One pass (`runwright sweep` runs one on request, whoever holds the lease: the
        store's operations are safe side by side): first the runs past their age (their
        logs need no trim), then long logs, long thread histories and old tombstones.
        With `renew`, the lease is renewed before each batch and the pass stops if it was
        lost (a pass slower than the lease, on a loaded machine, must not go on beside the
        next holder's)."""
        self._renew = renew
        report = SweepReport()
        retention = self.retention
        if retention.max_age_s is not None:
            age_s = retention.max_age_s
            await self._batches(lambda: self._store.run_reclaim(
                RunReclaimParams(None, self._batch, dry_run, max_age_s=age_s)), report.add, dry_run)
            if not dry_run:  # a published event's id as old: publishing it again is a new event
                await self._store.event_reclaim(EventReclaimParams(age_s))
        if retention.thread_max_runs is not None:
            cap = retention.thread_max_runs
            await self._batches(lambda: self._store.thread_run_reclaim(
                ThreadRunReclaimParams(cap, self._batch, dry_run)), report.add_capped, dry_run)
        if retention.max_events is not None:
            keep = retention.max_events
            await self._batches(lambda: self._store.event_trim(
                EventTrimParams(keep, self._batch, dry_run)), report.add_trim, dry_run)
        await self._sweep_threads(report, dry_run)
        # Whatever the bounds: a record no decision needs is no history anyone keeps.
        await self._batches(lambda: self._store.flow_key_reclaim(
            FlowKeyReclaimParams(self._batch, dry_run)), report.add_flow_keys, dry_run)
        crash_point("sweep.before_collect")
        if self._blobs is not None and self._collects(report, self._blob_grace_s):
            report.blobs = await self.collect_blobs(self._blobs, self._blob_grace_s, dry_run=dry_run)
        if not dry_run:
            SWEEPS.inc()
            RECLAIMED.labels("runs").inc(len(report.runs))
            RECLAIMED.labels("steps").inc(report.steps)
            RECLAIMED.labels("events").inc(report.events + report.trimmed_events)
            RECLAIMED.labels("tombstones").inc(len(report.tombstones))
            RECLAIMED.labels("messages").inc(report.messages)
            RECLAIMED.labels("blobs").inc(report.blobs)
        return report

    def _collects(self, report: SweepReport, grace_s: float) -> bool:
        """Whether this pass collects blobs: reading every row's names costs a scan of the
        store, so only after a pass that removed something, or the first pass, or once a
        grace period since the last (the orphans a crash left)."""
        return (report.removed_anything or self._collected_at is None
                or time.monotonic() - self._collected_at >= grace_s)

    async def collect_blobs(self, blobs: BlobStore, grace_s: float, dry_run: bool = False) -> int:
        """Delete the blobs older than `grace_s` that no row of the store names; how many.
        The old enough are listed before the store is read: a blob that old had its row
        committed before (core._blobs), so a blob named by a surviving row is kept."""
        if not dry_run:
            self._collected_at = time.monotonic()
        candidates = await asyncio.to_thread(lambda: collectable(blobs, grace_s))
        if not candidates:
            return 0
        named = await self._store.blob_references()
        gone = [name for name in candidates if name not in named]
        if gone and not dry_run:
            await asyncio.to_thread(blobs.delete, gone)
        return len(gone)

    async def _sweep_threads(self, report: SweepReport, dry_run: bool) -> None:
        """Thread histories beyond their bound, then the tombstones past their age."""
        retention = self.retention
        if retention.thread_max_messages is not None:
            keep = retention.thread_max_messages
            await self._batches(lambda: self._store.thread_message_trim(
                ThreadMessageTrimParams(keep, self._batch, dry_run)), report.add_messages, dry_run)
        if retention.tombstone_age_s is not None:
            age_s = retention.tombstone_age_s
            await self._batches(lambda: self._store.thread_tombstone_reclaim(
                ThreadTombstoneReclaimParams(age_s, self._batch, dry_run)), report.add_tombstones, dry_run)

    async def _batches(self, take: Callable[[], Awaitable[Batch]], add: Callable[[Batch], None],
                       dry_run: bool) -> None:
        # A dry run looks at one batch: what the next pass would begin with.
        for n in range(1 if dry_run else self._max_batches):
            if n and self._renew and not await self._holds_lease():
                return
            batch = await take()
            add(batch)
            if _size(batch) < self._batch:
                return


def _size(batch: RunReclaimed | EventsTrimmed | TombstonesReclaimed | ThreadMessagesTrimmed | int) -> int:
    """How much of a batch's limit it used: a smaller batch was the last there was."""
    if isinstance(batch, int):  # records of flow control keys removed
        return batch
    if isinstance(batch, TombstonesReclaimed):
        return len(batch.threads)
    if isinstance(batch, ThreadMessagesTrimmed):
        return batch.messages
    return len(batch.run_ids)
