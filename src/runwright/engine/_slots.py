"""A worker's slots: the runs it executes and the claims that may fill the rest.

One object owns what the claim loop, the runs' tasks and the completer's batches all read
and change (the worker's side tasks only read it), so the rules of a slot are written
once: when one is free, which attempt of a run is the run's, when a run stops holding one,
what a claim in flight holds, and which runs a batch of finishes may wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Iterator

from ..runs import Run
from ._executor import Active

__all__ = ["Slots"]


class Slots:
    """`concurrency` slots. A slot is held by a run from its claim until its function
    returns (its fenced finish then goes out holding none), or by a claim in flight
    for as many runs as it may bring."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.freed = asyncio.Event()  # set whenever a slot may have come free
        # Each run's newest attempt on this worker (its lease kept, its cancels delivered).
        self._active: dict[int, Active] = {}
        # Earlier attempts of a run in `_active` still winding down: a run failed and due
        # again at once is claimed again by the batch that writes its failure, before that
        # attempt's task has ended. They hold their slot (and a drain waits for them) until
        # then, and never the run's place in `_active`, which is the newest attempt's.
        self._leaving: list[Active] = []
        # Runs whose function has returned and whose fenced finish is on its way: they
        # hold no slot (the next claim need not wait for the write), but stay active so
        # their lease is kept until the write lands. At most `concurrency` of them.
        self._finishing = 0
        self._claiming = 0  # slots that claims in flight may fill (the loop's, or one along)
        # The last claim took all it asked for: more may be due (and a batch of finishes
        # claims for the slots it frees while this lasts).
        self.backlog = False
        # The latest claim that brought runs, and how many of its runs are still going: a
        # batch of finishes waits for those, not for a long run an earlier claim started.
        self._cohort = 0
        self._cohort_going = 0

    # -- reading --------------------------------------------------------------------

    @property
    def free(self) -> int:
        """Slots that neither a run nor a claim in flight holds."""
        held = len(self._active) + len(self._leaving) - self._finishing
        return self.concurrency - held - self._claiming

    @property
    def full(self) -> bool:
        """No slot free, or as many finishes on their way as there are slots (each keeps
        its lease until its write lands: a claim beside a stalled write waits)."""
        return self.free <= 0 or self._finishing >= self.concurrency

    @property
    def claiming(self) -> bool:
        return self._claiming > 0

    @property
    def idle(self) -> bool:
        """Running nothing, claiming nothing, with no claimed backlog."""
        return not self._active and not self._leaving and not self._claiming and not self.backlog

    @property
    def cohort_going(self) -> bool:
        """Runs of the latest claim are still going (a batch of finishes may wait)."""
        return self._cohort_going > 0

    def get(self, run_id: int) -> Active | None:
        """The run's newest attempt here (None: this worker executes it no more)."""
        return self._active.get(run_id)

    def runs(self) -> list[Active]:
        """The newest attempt of every run this worker executes."""
        return list(self._active.values())

    def run_ids(self) -> list[int]:
        return list(self._active)

    def tasks(self) -> list[asyncio.Task[None]]:
        """Every attempt's task still going, earlier ones winding down included."""
        return [active.task for active in [*self._active.values(), *self._leaving]]

    # -- claims ---------------------------------------------------------------------

    def reserve(self, most: int) -> int:
        """Hold the free slots (at most `most`) for a claim in flight; how many."""
        limit = min(self.free, most)
        self._claiming += limit
        return limit

    def claimed(self, limit: int, runs: list[Run] | None) -> None:
        """A claim of `limit` slots landed with `runs` (None: the store failed it): its
        slots are given back, to be held by the runs the caller starts now."""
        self._claiming -= limit
        self.backlog = runs is not None and len(runs) == limit
        if runs:
            self._cohort, self._cohort_going = self._cohort + 1, len(runs)

    # -- runs -----------------------------------------------------------------------

    def start(self, run: Run, task: asyncio.Task[None]) -> Active:
        """The run's new attempt, started by `task`, holds a slot and is the run's from now."""
        earlier = self._active.get(run.id)
        if earlier is not None:
            self._leaving.append(earlier)
        active = self._active[run.id] = Active(run, task, cohort=self._cohort)
        return active

    @contextlib.contextmanager
    def finishing(self, active: Active) -> Iterator[None]:
        """While `active`'s finish is written: it holds no slot, but stays the run's."""
        active.finishing = True
        self._finishing += 1
        self._gone(active)  # before the finish is handed in: it may end a gathering
        self.freed.set()
        try:
            yield
        finally:
            self._finishing -= 1

    def end(self, active: Active) -> None:
        """`active`'s attempt is over: its slot is free, and the run no longer this
        attempt's (a newer attempt keeps its place)."""
        if not active.finishing:
            self._gone(active)
        if self._active.get(active.run.id) is active:
            del self._active[active.run.id]
        else:
            self._leaving.remove(active)
        self.freed.set()

    def _gone(self, active: Active) -> None:
        """`active` finished or left: no batch waits for it any more."""
        if active.cohort == self._cohort:
            self._cohort_going -= 1
