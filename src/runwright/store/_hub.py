"""In-process fan-out of change notifications.

Backends feed it (PostgreSQL from LISTEN/NOTIFY, SQLite from its data-version poll, both
from their own writes); waiters wake and re-read the store. A notification is only a hint
that something may have changed: the store stays the truth, so a lost or spurious wake-up
costs a read, never correctness.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence

from ..runs import Run, RunState
from ._params import RunFinishParams

__all__ = ["CANCEL", "CHANNELS", "QUEUED", "RUN_CHANNELS", "WORK_CHANNELS", "Hub", "done_topic",
           "events_topic"]

QUEUED = "queued"  # runs became due (submitted, retried, rescued, released)
CANCEL = "cancel"  # a cancel was requested for a running run

# The channels a backend carries notifications on (each namespaced by the backend): due
# work and cancels, which a worker listens to, and runs' ends and logs' growth, which every
# claim and finish announces and only a follower or a result waiter needs
# (Notifications.listen).
WORK_CHANNELS = (QUEUED, CANCEL)
RUN_CHANNELS = ("done", "events")
CHANNELS = (*WORK_CHANNELS, *RUN_CHANNELS)


def done_topic(run_id: int) -> str:
    return f"done:{run_id}"


class Hub:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._run_watches = 0  # open watches of one run's topics (done:<id>, events:<id>)
        # True while the backend cannot deliver notifications (a listener reconnecting):
        # pollers shorten their interval instead of trusting silence.
        self.degraded = False

    @contextmanager
    def watch(self, *topics: str) -> Iterator[asyncio.Event]:
        """An event set whenever one of `topics` fires while the block is open."""
        event = asyncio.Event()
        per_run = sum(1 for topic in topics if ":" in topic)
        self._run_watches += per_run
        for topic in topics:
            self._waiters[topic].add(event)
        try:
            yield event
        finally:
            self._run_watches -= per_run
            for topic in topics:
                waiters = self._waiters.get(topic)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[topic]

    def fire(self, topic: str) -> None:
        for event in self._waiters.get(topic, ()):
            event.set()

    def fire_finished(self, finishes: Sequence[RunFinishParams]) -> None:
        """What a batch of finishes changed, for this process's waiters: work is due
        again (a requeue), runs ended, their logs grew."""
        if any(f.state is RunState.QUEUED or f.limited for f in finishes):
            self.fire(QUEUED)
        self.fire_runs(done_topic, (f.run_id for f in finishes if f.state is not RunState.QUEUED))
        self.fire_runs(events_topic, (f.run_id for f in finishes))

    def fire_changed(self, runs: Sequence[Run]) -> None:
        """Runs changed by a decision (rescue, cancel, retry, expiry): work may be due,
        some ended, their logs grew."""
        if runs:
            self.fire(QUEUED)
            self.fire_runs(done_topic, (r.id for r in runs if r.done))
            self.fire_runs(events_topic, (r.id for r in runs))

    def fire_all(self) -> None:
        """Wake everyone (a backend that only knows "something changed")."""
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    def fire_runs(self, topic: Callable[[int], str], run_ids: Iterable[int]) -> None:
        """Fire `topic(id)` for each run. Nobody waiting on a run's topics (a worker alone
        does not) means the ids every finish broadcasts need not become topics at all."""
        if self._run_watches:
            for run_id in run_ids:
                self.fire(topic(run_id))

    def has_waiters(self) -> bool:
        return bool(self._waiters)


def events_topic(run_id: int) -> str:
    return f"events:{run_id}"
