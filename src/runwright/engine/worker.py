"""The worker: slots, the claim loop, and the side tasks that keep claims honest.

One Worker per process. Side tasks (claimer, completer, lease keeper, cancel watcher,
heartbeat, rescuer) are supervised: if one dies of an unexpected error the worker stops
loudly instead of limping on. A store that blinks is not unexpected: each side task
retries it with backoff.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from ..context import Context
from ..crashpoints import crash_point
from ..errors import ConfigError, LeaseLost, PayloadTooLarge, SerializationError, StoreError, TaskTimeout
from ..logs import event
from ..runs import Run, RunState
from ..serde import encode, encode_error
from ..store.base import (
    RunClaimParams,
    RunExtendParams,
    RunFinishParams,
    RunRescueParams,
    WorkerRegisterParams,
    now_s,
)
from ..store.hub import CANCEL, QUEUED
from .completer import Completer

if TYPE_CHECKING:
    from ..app import App
    from ..tasks import TaskSpec

__all__ = ["Worker", "WorkerConfig", "WorkerCrashed"]

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR
S = RunState


class WorkerCrashed(RuntimeError):
    """A side task of the worker died; the worker stopped rather than limp on."""


@dataclass(slots=True)
class WorkerConfig:
    """How a worker runs. Every field has a default that suits production on PostgreSQL."""

    concurrency: int = 10  # runs at once (asyncio slots). Defaults to 10.
    queues: Sequence[str] = ("default",)  # Defaults to the "default" queue.
    lease_s: float = 30.0  # a stalled worker loses its runs after this. Defaults to 30 s.
    poll_s: float = 1.0  # idle re-check when notifications are healthy. Defaults to 1 s.
    heartbeat_s: float = 2.0  # Defaults to 2 s.
    rescue_interval_s: float = 0.5  # how often dead owners are looked for. Defaults to 0.5 s.
    worker_stale_s: float = 15.0  # heartbeat age that means dead (SQLite). Defaults to 15 s.
    cancel_poll_s: float = 0.5  # cancel check between notifications. Defaults to 0.5 s.
    drain_grace_s: float = 10.0  # graceful stop: time for running runs. Defaults to 10 s.
    max_recoveries: int = 20  # takeovers before a run goes dead. Defaults to 20.
    claim_batch: int = 0  # most runs per claim; 0 means `concurrency`. Defaults to 0.
    orphan_check_s: float = 30.0  # how often to report runs of tasks we lack. Defaults to 30 s.
    orphan_age_s: float = 10.0  # ... that have been due this long. Defaults to 10 s.

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.lease_s <= 3 * self.heartbeat_s / 2 and self.lease_s < 1:
            raise ConfigError(f"lease_s={self.lease_s} is too short to be renewed in time")
        if isinstance(self.queues, str):
            self.queues = [q for q in self.queues.split(",") if q]
        if not self.queues:
            raise ConfigError("a worker needs at least one queue")


class Stop(enum.Enum):
    """Why the worker cancelled a run's coroutine: each ends the run differently."""

    CANCEL = "cancel requested"  # -> cancelled
    LEASE_LOST = "lease lost"  # -> nothing written: the new owner decides
    SHUTDOWN = "worker stopping"  # -> given back (queued), attempt not counted


@dataclass(slots=True)
class Active:
    run: Run
    task: asyncio.Task[None]
    stop: Stop | None = None
    finishing: bool = False  # the function returned; its fenced write is on its way


@dataclass
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    cancelled: int = 0
    released: int = 0
    lease_lost: int = 0
    rescued: int = 0
    started_at: float = field(default_factory=time.time)


def jittered(seconds: float, spread: float = 0.2) -> float:
    """Every poll, heartbeat and renewal is jittered so that a fleet does not beat in step."""
    return seconds * random.uniform(1 - spread, 1 + spread)


class Worker:
    def __init__(self, app: App, config: WorkerConfig | None = None) -> None:
        self.app = app
        self.config = config or WorkerConfig()
        self.store = app.store
        self.id = 0
        self.stats = WorkerStats()
        self._active: dict[int, Active] = {}
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._completer = Completer(self.store)
        self._tasks: list[str] = []

    # -- lifecycle ------------------------------------------------------------------

    def stop(self) -> None:
        """Ask for a graceful stop: claim nothing more, drain, give back the rest."""
        self._stopping.set()

    @property
    def active_count(self) -> int:
        return len(self._active)

    async def run(self, ready: Callable[[Worker], Any] | None = None) -> None:
        """Work until `stop()`; raises WorkerCrashed if a side task died."""
        await self.app.open()
        self._tasks = sorted(self.app.tasks)
        if not self._tasks:
            raise ConfigError("this app registers no task: a worker would have nothing to do")
        await self._register()
        await self.store.listen()
        completer = asyncio.create_task(self._completer.run(), name="completer")
        sides = [asyncio.create_task(coro(), name=coro.__name__) for coro in (
            self._claim_loop, self._lease_keeper, self._cancel_watcher, self._heartbeat, self._rescuer)]
        event(INFO, "worker started", worker=self.id, queues=",".join(self.config.queues),
              concurrency=self.config.concurrency, tasks=len(self._tasks))
        if ready is not None:
            ready(self)
        stopping = asyncio.create_task(self._stopping.wait())
        done, _ = await asyncio.wait([stopping, completer, *sides], return_when=asyncio.FIRST_COMPLETED)
        # A side task that raised, or ended although nobody asked us to stop, is a crash.
        # (The claim loop ends normally when stop() came before its first check.)
        crashed = [t for t in done if t is not stopping and (
            t.cancelled() or t.exception() is not None or not self._stopping.is_set())]
        for task in crashed:
            event(ERROR, f"side task {task.get_name()} died; the worker stops",
                  exc_info=None if task.cancelled() else task.exception(), worker=self.id)
        self._stopping.set()
        await self._shutdown(sides, completer, grace_s=0 if crashed else self.config.drain_grace_s)
        stopping.cancel()
        if crashed:
            first = crashed[0]
            reason = "cancelled" if first.cancelled() else repr(first.exception())
            raise WorkerCrashed(f"side task {first.get_name()} died: {reason}")

    async def _register(self) -> None:
        self.id = await self.store.worker_register(WorkerRegisterParams(
            host=socket.gethostname(), pid=os.getpid(), queues=list(self.config.queues),
            tasks=self._tasks))

    async def _shutdown(self, sides: list[asyncio.Task[None]], completer: asyncio.Task[None],
                        grace_s: float) -> None:
        # Claim nothing more, but keep renewing leases and watching cancels while draining.
        claimer, others = sides[0], sides[1:]
        claimer.cancel()
        await asyncio.gather(claimer, return_exceptions=True)
        running = [a.task for a in self._active.values()]
        if running and grace_s > 0:
            event(INFO, "draining", worker=self.id, running=len(running), grace_s=grace_s)
            await asyncio.wait(running, timeout=grace_s)
        rest = list(self._active.values())
        for active in rest:
            self._interrupt(active, Stop.SHUTDOWN)
        if rest:
            event(INFO, "giving back unfinished runs", worker=self.id, runs=len(rest))
            await asyncio.wait([a.task for a in rest], timeout=5.0)
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        completer.cancel()  # flushes what is pending, then stops
        await asyncio.gather(completer, return_exceptions=True)
        try:
            await self.store.worker_deregister(self.id)
        except StoreError as exc:
            event(WARNING, "could not deregister; others will find this worker dead",
                  worker=self.id, error=str(exc))
        event(INFO, "worker stopped", worker=self.id, **vars(self.stats))

    # -- claiming -------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        config = self.config
        batch = config.claim_batch or config.concurrency
        with self.store.hub.watch(QUEUED) as queued:
            while not self._stopping.is_set():
                free = config.concurrency - len(self._active)
                if free <= 0:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                    continue
                queued.clear()
                limit = min(free, batch)
                crash_point("worker.claim_loop")
                runs = await self._store_call(self.store.run_claim, RunClaimParams(
                    self.id, config.queues, self._tasks, limit, config.lease_s))
                if runs:
                    crash_point("worker.after_claim")
                for run in runs or ():
                    self._start(run)
                if runs is not None and len(runs) == limit:
                    continue  # more may be due: claim again at once
                await self._idle(queued)

    async def _idle(self, queued: asyncio.Event) -> None:
        """Sleep until work may be due: a notification, the next run_at, or the poll."""
        wait_s = 0.1 if self.store.hub.degraded else jittered(self.config.poll_s)
        next_due = await self._store_call(self.store.run_next_due_at, self.config.queues, self._tasks)
        if next_due is not None:
            wait_s = max(0.0, min(wait_s, next_due - now_s()))
        if wait_s > 0 and not queued.is_set():
            try:
                await asyncio.wait_for(queued.wait(), wait_s)
            except TimeoutError:
                pass

    def _start(self, run: Run) -> None:
        self.stats.claimed += 1
        task = asyncio.create_task(self._execute(run), name=f"run-{run.id}")
        self._active[run.id] = Active(run, task)

    # -- executing ------------------------------------------------------------------

    async def _execute(self, run: Run) -> None:
        spec = self.app.tasks[run.task]
        event(DEBUG, "run started", run_id=run.id, attempt=run.attempt, worker=self.id,
              task=run.task, fence=run.fence)
        try:
            finish = await self._attempt(run, spec)
            if finish is not None:
                crash_point("worker.before_finish")
                self._active[run.id].finishing = True
                await self._completer.finish(finish)
                self._count(finish)
        except LeaseLost as exc:
            self.stats.lease_lost += 1
            event(WARNING, f"write refused: {exc}; run abandoned to its new owner",
                  run_id=run.id, attempt=run.attempt, worker=self.id, fence=run.fence)
        finally:
            self._active.pop(run.id, None)
            self._slot_freed.set()

    async def _attempt(self, run: Run, spec: TaskSpec) -> RunFinishParams | None:
        """Run the function once; return the fenced finish that records how it ended."""
        ctx = Context(self.app, run, self.id)
        try:
            async with asyncio.timeout(spec.timeout_s):
                value = await spec.invoke(ctx, json.loads(run.args))
            result = encode(value, f"result of task {run.task!r}", self.app.max_payload_bytes)
        except asyncio.CancelledError:
            active = self._active.get(run.id)
            if active is None or active.stop is None:
                raise  # the worker itself is being torn down
            return self._stopped(run, active.stop)
        except TimeoutError as exc:
            timeout = TaskTimeout(f"attempt {run.attempt} ran past timeout_s={spec.timeout_s}")
            timeout.__cause__ = exc
            return self._failed(run, spec, timeout)
        except Exception as exc:
            return self._failed(run, spec, exc)
        event(DEBUG, "run succeeded", run_id=run.id, attempt=run.attempt, worker=self.id)
        return RunFinishParams(run.id, run.fence, S.SUCCEEDED, result=result)

    def _stopped(self, run: Run, why: Stop) -> RunFinishParams | None:
        fields = dict(run_id=run.id, attempt=run.attempt, worker=self.id, fence=run.fence)
        if why is Stop.LEASE_LOST:
            self.stats.lease_lost += 1
            event(WARNING, "lease lost: run abandoned to its new owner", **fields)
            return None
        if why is Stop.CANCEL:
            event(INFO, "run cancelled", **fields)
            return RunFinishParams(run.id, run.fence, S.CANCELLED,
                                   error=json.dumps({"type": "Cancelled", "message": "cancelled on request"}))
        event(INFO, "run given back (worker stopping)", **fields)
        return RunFinishParams(run.id, run.fence, S.QUEUED, release=True)

    def _failed(self, run: Run, spec: TaskSpec, error: BaseException) -> RunFinishParams:
        fields = dict(run_id=run.id, attempt=run.attempt, worker=self.id, task=run.task,
                      error=f"{type(error).__name__}: {error}")
        detail = encode_error(error)
        if spec.retry.is_final(error) or isinstance(error, (SerializationError, PayloadTooLarge)):
            event(WARNING, "run failed (final error, no retry)", **fields)
            return RunFinishParams(run.id, run.fence, S.FAILED, error=detail)
        if run.attempt >= run.max_attempts:
            event(WARNING, "run dead: attempts exhausted", **fields)
            return RunFinishParams(run.id, run.fence, S.DEAD, error=detail)
        delay_s = spec.retry.backoff.delay_s(run.attempt)
        event(INFO, "run retrying", retry_in_s=round(delay_s, 3), **fields)
        return RunFinishParams(run.id, run.fence, S.QUEUED, error=detail, run_at=now_s() + delay_s)

    def _count(self, finish: RunFinishParams) -> None:
        """Tally an end once it is durable (a refused write counts as lease_lost instead)."""
        if finish.state is S.QUEUED:
            name = "released" if finish.release else "retried"
        else:
            name = {S.SUCCEEDED: "succeeded", S.CANCELLED: "cancelled"}.get(finish.state, "failed")
        setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _interrupt(self, active: Active, why: Stop) -> None:
        # Once the function has returned there is nothing to stop: its write goes out and
        # the fence decides (a refusal is reported as LeaseLost by _execute).
        if active.stop is None and not active.finishing:
            active.stop = why
            active.task.cancel()

    # -- side tasks -----------------------------------------------------------------

    async def _lease_keeper(self) -> None:
        """Renew leases of live runs; a run whose fence was superseded is abandoned."""
        while True:
            await asyncio.sleep(jittered(self.config.lease_s / 4))
            runs = [(a.run.id, a.run.fence) for a in self._active.values()]
            if not runs:
                continue
            result = await self._store_call(self.store.run_extend, RunExtendParams(
                self.id, runs, self.config.lease_s))
            if result is not None:
                self._apply(result.lost, Stop.LEASE_LOST)
                self._apply(result.cancel_requested, Stop.CANCEL)

    async def _cancel_watcher(self) -> None:
        """Stop runs whose cancel was requested: woken by notifications, with a short poll."""
        with self.store.hub.watch(CANCEL) as requested:
            while True:
                try:
                    await asyncio.wait_for(requested.wait(), jittered(self.config.cancel_poll_s))
                except TimeoutError:
                    pass
                requested.clear()
                if not self._active:
                    continue
                runs = await self._store_call(self.store.run_get_many, list(self._active))
                for run in runs or ():
                    active = self._active.get(run.id)
                    if active is None:
                        continue
                    if run.fence != active.run.fence or run.state is not S.RUNNING:
                        self._interrupt(active, Stop.LEASE_LOST)
                    elif run.cancel_requested:
                        self._interrupt(active, Stop.CANCEL)
                await asyncio.sleep(0.05)  # SQLite wakes us on every commit: don't spin

    def _apply(self, run_ids: list[int], why: Stop) -> None:
        for run_id in run_ids:
            active = self._active.get(run_id)
            if active is not None:
                self._interrupt(active, why)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(jittered(self.config.heartbeat_s))
            alive = await self._store_call(self.store.worker_heartbeat, self.id)
            if alive is False:
                # Declared dead (stalled too long, or our session dropped): our runs were or
                # will be taken over, and their writes refused by the fence. Come back fresh.
                old = self.id
                await self._register()
                event(WARNING, "registration lost; registered again", worker=self.id, previous=old)

    async def _rescuer(self) -> None:
        """Take back runs of dead workers and expired leases (every worker does this)."""
        params = RunRescueParams(self.config.max_recoveries, self.config.worker_stale_s)
        next_orphan_check = time.monotonic() + self.config.orphan_check_s
        while True:
            await asyncio.sleep(jittered(self.config.rescue_interval_s))
            if time.monotonic() >= next_orphan_check:
                next_orphan_check = time.monotonic() + self.config.orphan_check_s
                await self._report_orphans()
            for run in await self._store_call(self.store.run_rescue_many, params) or ():
                self.stats.rescued += 1
                level = WARNING if run.state is S.DEAD else INFO
                event(level, f"run taken over from a lost worker -> {run.state.value}",
                      run_id=run.id, attempt=run.attempt, worker=self.id, recoveries=run.recoveries)

    async def _report_orphans(self) -> None:
        """Say loudly when runs in our queues wait for a task this worker does not have:
        they are left for a worker that registers it, and if none does they wait forever."""
        counts = await self._store_call(self.store.run_count_due_by_task, self.config.queues,
                                        now_s() - self.config.orphan_age_s)
        for task, count in sorted((counts or {}).items()):
            if task not in self.app.tasks:
                event(WARNING, f"{count} due runs of task {task!r} wait for a worker that "
                      f"registers it; this one does not", worker=self.id, task=task, runs=count)

    async def _store_call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Call the store; on a store error log, back off and return None (callers retry
        on their next tick). Anything else propagates: the supervisor stops the worker."""
        try:
            return await fn(*args)
        except StoreError as exc:
            event(WARNING, "store unavailable; will retry", worker=self.id,
                  operation=getattr(fn, "__name__", "?"), error=str(exc))
            await asyncio.sleep(jittered(0.5))
            return None
