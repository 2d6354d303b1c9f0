"""The rescuer: every worker takes back runs of dead workers and of expired leases, ends
runs whose deadline passed (so a deadline holds even when a run's own worker is dead),
and says loudly when due runs wait for a task that it does not register."""

from __future__ import annotations

import logging
import time
from typing import Callable, Collection, Sequence

from ..clock import SYSTEM_CLOCK, Clock
from ..logs import event
from ..resilience import store_call
from ..runs import Run, RunState
from ..store.interface import Store
from ..store.params import RunCountDueParams, RunExpireParams, RunRescueParams

__all__ = ["Rescuer"]


class Rescuer:
    def __init__(self, store: Store, queues: Sequence[str], tasks: Collection[str],
                 params: RunRescueParams, orphan_check_s: float, orphan_age_s: float,
                 clock: Clock = SYSTEM_CLOCK,
                 on_unrunnable: Callable[[int], None] = lambda _count: None) -> None:
        self._store = store
        self._on_unrunnable = on_unrunnable
        self._clock = clock
        self._queues = queues
        self._tasks = tasks
        self._params = params
        self._orphan_check_s = orphan_check_s
        self._orphan_age_s = orphan_age_s
        self._next_orphan_check = time.monotonic() + orphan_check_s

    async def tick(self, worker_id: int, on_rescued: Callable[[Run], None]) -> None:
        if time.monotonic() >= self._next_orphan_check:
            self._next_orphan_check = time.monotonic() + self._orphan_check_s
            await self._report_orphans(worker_id)
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
        does, they would wait forever in silence, so say so. Those that no live worker
        registers are unrunnable: counted for the metric (one registry read per check)."""
        due_before = self._clock() - self._orphan_age_s
        counts = await store_call(self._store.run_count_due_by_task,
                                  RunCountDueParams(self._queues, due_before), worker=worker_id)
        if counts is None:
            return
        orphans = {task: count for task, count in counts.items() if task not in self._tasks}
        workers = await store_call(self._store.worker_list, worker=worker_id) if orphans else []
        if workers is None:
            return
        registered = {task for worker in workers for task in worker.tasks}
        self._on_unrunnable(sum(count for task, count in orphans.items() if task not in registered))
        for task, count in sorted(orphans.items()):
            others = "another worker does" if task in registered else "no live worker does"
            event(logging.WARNING, f"{count} due runs of task {task!r} wait for a worker "
                  f"that registers it; this one does not, {others}", worker=worker_id, task=task, runs=count)
