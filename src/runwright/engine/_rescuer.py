"""The rescuer: every worker takes back runs of dead workers and of expired leases, ends
runs whose deadline passed (so a deadline holds even when a run's own worker is dead),
says loudly when due runs wait for a task that it does not register, and closes `failed`
the runs that no live worker can run once they were due for `unrunnable_after_s` (their
task registered by no live worker for the major that submitted them: a GPU task with no
GPU worker up, runs of an old major after its last worker drained)."""

from __future__ import annotations

import logging
import time
from typing import Callable, Collection, Sequence

from ..core._clock import SYSTEM_CLOCK, Clock
from ..core._resilience import store_call
from ..observe._logs import event
from ..runs import Run, RunState
from ..store._interface import Store
from ..store._params import RunCountDueParams, RunExpireParams, RunRescueParams, RunUnrunnableParams

__all__ = ["Rescuer"]

# The shortest time between two looks for unrunnable runs (a store read of the due runs by
# kind): a tiny `unrunnable_after_s` does not make every worker read it at every tick.
UNRUNNABLE_LOOK_MIN_S = 0.5


class Rescuer:
    def __init__(self, store: Store, queues: Sequence[str], tasks: Collection[str],
                 params: RunRescueParams, orphan_check_s: float, orphan_age_s: float,
                 clock: Clock = SYSTEM_CLOCK,
                 on_unrunnable: Callable[[int], None] = lambda _count: None,
                 unrunnable_after_s: float = 3600.0,
                 on_closed: Callable[[int], None] = lambda _count: None) -> None:
        self._store = store
        self._on_unrunnable = on_unrunnable
        self._on_closed = on_closed
        self._unrunnable_after_s = unrunnable_after_s
        self._clock = clock
        self._queues = queues
        self._tasks = tasks
        self._params = params
        self._orphan_check_s = orphan_check_s
        self._orphan_age_s = orphan_age_s
        self._next_orphan_check = time.monotonic() + orphan_check_s
        # Unrunnable runs are looked for every half `unrunnable_after_s` (at least every
        # UNRUNNABLE_LOOK_MIN_S, at most every orphan check): a run that became unrunnable
        # is seen before it is due to close, and the close is then made when it is due (see
        # _watch_unrunnable), not at the next look. The first look is at once.
        self._unrunnable_look_s = min(orphan_check_s, max(UNRUNNABLE_LOOK_MIN_S, unrunnable_after_s / 2))
        self._next_unrunnable_look = time.monotonic()

    def next_look_in(self) -> float:
        """Seconds until this rescuer's next look for unrunnable runs is due: its loop
        wakes then, so a run closes when it is due, not at the next tick after."""
        return max(0.0, self._next_unrunnable_look - time.monotonic())

    async def tick(self, worker_id: int, on_rescued: Callable[[Run], None]) -> None:
        if time.monotonic() >= self._next_orphan_check:
            self._next_orphan_check = time.monotonic() + self._orphan_check_s
            await self._report_orphans(worker_id)
        if time.monotonic() >= self._next_unrunnable_look:
            await self._watch_unrunnable(worker_id)
        for run in await store_call(self._store.run_expire_many, RunExpireParams(),
                                    worker=worker_id) or ():
            event(logging.WARNING, "run failed: its deadline passed", run_id=run.id,
                  attempt=run.attempt, worker=worker_id)
        for run in await store_call(self._store.run_rescue_many, self._params, worker=worker_id) or ():
            on_rescued(run)
            level = logging.WARNING if run.state is RunState.DEAD else logging.INFO
            event(level, f"run taken over from a lost worker -> {run.state.value}",
                  run_id=run.id, attempt=run.attempt, worker=worker_id, recoveries=run.recoveries)

    async def _report_orphans(self, worker_id: int) -> None:
        """Runs of a task this worker lacks are left for a worker that has it; if none
        does, they would wait forever in silence, so say so. Those that no live worker can
        run (by the workers table: task, major, queue) are unrunnable: counted for the
        metric, and closed `failed` once due for `unrunnable_after_s` (by the store's clock)."""
        # One read of the due runs per check: only when some are unrunnable at all (rare)
        # does the close look for those due long enough.
        age_s = min(self._orphan_age_s, self._unrunnable_after_s)
        unrunnable = await store_call(self._store.run_count_unrunnable,
                                      RunUnrunnableParams(age_s, now=self._clock.judged()), worker=worker_id)
        if unrunnable is None:
            return
        closed = await self._close_unrunnable(worker_id) if unrunnable else 0
        self._on_unrunnable(max(0, sum(kind[3] for kind in unrunnable) - closed))
        for queue, task, major, count in unrunnable:
            of = "no version recorded" if major is None else f"major {major}"
            event(logging.WARNING, f"{count} due runs of task {task!r} wait for a worker that can "
                  f"run them ({of}, queue {queue!r}); no live worker can (closed failed once due "
                  f"for {self._unrunnable_after_s:g} s)", worker=worker_id, task=task, runs=count)
        await self._report_others(worker_id, {task for _, task, _, _ in unrunnable})

    async def _watch_unrunnable(self, worker_id: int) -> None:
        """How long the longest-due unrunnable run has been due: close what is due to
        close now, and look next when the next one will be (or at the next look)."""
        look_s = self._unrunnable_look_s
        age_s = await store_call(self._store.run_age_unrunnable,
                                 RunUnrunnableParams(now=self._clock.judged()), worker=worker_id)
        if age_s is not None and age_s >= self._unrunnable_after_s:
            # Closed some: the next oldest may be due at once (looked at next tick).
            look_s = 0.0 if await self._close_unrunnable(worker_id) else look_s
        elif age_s is not None:
            look_s = min(look_s, self._unrunnable_after_s - age_s)
        self._next_unrunnable_look = time.monotonic() + look_s

    async def _close_unrunnable(self, worker_id: int) -> int:
        closed = await store_call(self._store.run_fail_unrunnable_many, RunUnrunnableParams(
            self._unrunnable_after_s, now=self._clock.judged()), worker=worker_id) or []
        if closed:
            self._on_closed(len(closed))
        for run in closed:
            event(logging.WARNING, f"run failed: unrunnable (no live worker could run task "
                  f"{run.task!r} of version {run.version or 'unrecorded'} for "
                  f"{self._unrunnable_after_s:g} s)", run_id=run.id, attempt=run.attempt,
                  worker=worker_id, task=run.task)
        return len(closed)

    async def _report_others(self, worker_id: int, unrunnable: Collection[str]) -> None:
        """Due runs of tasks this worker lacks that another live worker can run: said
        loudly too, a task missing from some workers is often a deployment's mistake."""
        due_before = self._clock() - self._orphan_age_s
        counts = await store_call(self._store.run_count_due_by_task,
                                  RunCountDueParams(self._queues, due_before), worker=worker_id)
        for task, count in sorted((counts or {}).items()):
            if task not in self._tasks and task not in unrunnable:
                event(logging.WARNING, f"{count} due runs of task {task!r} wait for a worker that "
                      f"registers it; this one does not, another worker does", worker=worker_id,
                      task=task, runs=count)
