"""Why a run has not ended: one line for a caller that waited on it (`result(timeout_s=)`,
`runwright submit --wait`), so that a wait never ends in a bare timeout.

What a run waits for is read where it is recorded: its state and due time, its last
event (a park says what it waits on: a durable sleep, a person's answer, its children; a
retry says its backoff), its thread's open runs, and the live workers (a run whose task
and queue no live worker serves waits for one to start)."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from ..core._journal import Event
from ..core._versions import major_of
from ..runs import Run, RunState
from ..store._params import WorkerInfo

__all__ = ["WhyAccess", "live_workers_serving", "utc", "why_not_ended"]

WHAT_A_PARK_WAITS_ON = {
    "sleep": "it sleeps (ctx.sleep) until {until}",
    "answer": "it waits for a person's answer to its question (runwright questions; app.answer)",
    "children": "it waits for its child runs to end",
}


class WhyAccess(Protocol):
    """What the explanation reads, through the scope the caller waited in."""

    def now(self) -> float: ...

    async def list_workers(self) -> list[WorkerInfo]: ...

    async def events_page(self, run_id: int, after: int = 0, limit: int = ...) -> list[Event]: ...

    async def list_runs(self, *, states: list[RunState], thread: str | None, limit: int) -> list[Run]: ...

    async def unrunnable_kinds(self) -> list[tuple[str, str, int | None, int]]: ...


def utc(epoch: float) -> str:
    """An instant as every face writes one: ISO 8601, UTC, to the second."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def live_workers_serving(workers: list[WorkerInfo], task: str, queue: str, now: float) -> list[WorkerInfo]:
    """The registered workers with a fresh heartbeat (by the store's clock) that claim
    `task` on `queue`. A worker killed outright stays registered until another declares
    it dead, so registration alone is not life: a heartbeat older than a worker's default
    `worker_stale_s` is not counted."""
    from ..engine._worker import WorkerConfig  # the engine's default, read when asked

    stale_before = now - WorkerConfig().worker_stale_s
    return [worker for worker in workers
            if worker.heartbeat_at >= stale_before and task in worker.tasks and queue in worker.queues]


async def why_not_ended(scope: WhyAccess, run: Run) -> str:
    """What `run` (as just read) is waiting for, in one clause."""
    if run.state is RunState.RUNNING:
        return f"it is running (attempt {run.attempt} of {run.max_attempts}, worker {run.owner})"
    if run.state is not RunState.QUEUED:
        return f"it is {run.state.value}"
    now = scope.now()
    last = await _last_event(scope, run)
    if run.run_at > now and last is not None:
        if last.kind == "parked":
            reason = str(last.data.get("reason", ""))
            if reason in WHAT_A_PARK_WAITS_ON:
                return WHAT_A_PARK_WAITS_ON[reason].format(until=utc(run.run_at))
        if last.kind == "retrying":  # a queued run's attempt is the one it waits to start
            return (f"attempt {run.attempt - 1} failed; attempt {run.attempt} of {run.max_attempts} "
                    f"starts at {utc(run.run_at)}")
    if run.run_at > now:
        return f"it is due at {utc(run.run_at)}"
    if run.thread is not None:
        ahead = [other for other in await scope.list_runs(
            states=[RunState.QUEUED, RunState.RUNNING], thread=run.thread, limit=100)
            if other.id != run.id and (other.state is RunState.RUNNING or other.started_at is not None
                                       or other.id < run.id)]
        if ahead:
            return f"it waits its turn on thread {run.thread!r}: run {min(o.id for o in ahead)} goes first"
    if not live_workers_serving(await scope.list_workers(), run.task, run.queue, now):
        return (f"no live worker runs task {run.task!r} on queue {run.queue!r}: start one "
                f"(runwright worker MODULE:APP --queues {run.queue})")
    # Served, but maybe not for the major of the app version that submitted it (the
    # store's own judgement, as the rescuer's that closes such a run).
    major = None if run.version is None else major_of(run.version)
    if any(queue == run.queue and task == run.task and (kind_major is None or kind_major == major)
           for queue, task, kind_major, _count in await scope.unrunnable_kinds()):
        return (f"no live worker can run it: the workers serving task {run.task!r} on queue "
                f"{run.queue!r} do not run major {major} (the app version {run.version} submitted "
                f"it); it is closed failed (Unrunnable) once due for their --unrunnable-after-s")
    return f"it is due and waits for a free slot of the workers serving queue {run.queue!r}"


async def _last_event(scope: WhyAccess, run: Run) -> Event | None:
    if run.last_seq <= 0:
        return None
    page = await scope.events_page(run.id, after=run.last_seq - 1, limit=1)
    return page[-1] if page else None
