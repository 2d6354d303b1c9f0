"""The worker: slots, the claim loop, and the side tasks that keep claims honest.

One Worker per process. Side tasks (claimer, completer, lease keeper, cancel watcher,
heartbeat, rescuer, the fleet heartbeat) are supervised: if one dies of an unexpected
error the worker stops loudly instead of limping on. A store that blinks is not
unexpected: each side task retries it with backoff.

In the fleet (when the App gives it a way to join): `resyncing` from the slot's claim
until the boot resync is done (registration, listening, schedules, paused queues), then
`ready`; `recycling`, with the drain grace it announces, from a stop request (its first
SIGTERM/SIGINT, or a `recycle` op) until the drain ends; then the row is deleted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence

from ..core import _inputs as inputs
from ..core._clock import Clock
from ..core._payloads import load
from ..core._resilience import is_store_failure, jittered, store_call, through_blinks
from ..core._waiting import halt, wait_set
from ..errors import ConfigError, DeploymentMoved, InvalidInput, LeaseLost, StoreError
from ..observe import _spans as telemetry
from ..observe._logs import event
from ..runs import Run, RunState
from ..store._hub import CANCEL, QUEUED
from ..store._liveness import this_machine
from ..store._params import (
    RunClaimParams,
    RunExtendParams,
    RunInsertParams,
    RunLimitedTasksParams,
    RunNextDueParams,
    RunRescueParams,
    WorkerHeartbeatParams,
    WorkerRegisterParams,
    WorkerWatchParams,
)
from ..tasks._fair import FairLimitsOf
from ..tasks._submission import Submission, insert_params
from ._completer import Completer
from ._crashpoints import crash_point
from ._executor import Active, Stop, run_attempt
from ._instruments import Instruments, WorkerStats
from ._parking import RunControl
from ._rescuer import Rescuer
from ._scheduler import Scheduler, save_schedules
from ._slots import Slots
from ._sweeper import Retention, Sweeper

if TYPE_CHECKING:
    from ..fleet import Member
    from ._runtime import Runtime

__all__ = ["SWEEP_LEASE_TICKS", "NotReady", "Worker", "WorkerConfig", "WorkerCrashed"]


def _refusing(merge: Callable[[str, str], str], task: str) -> Callable[[str, str], str]:
    """A fire's merge (a debounce's, the user's code): what it raises refuses that fire
    (InvalidInput, which the scheduler logs), not the worker's scheduler."""
    def merged(standing: str, new: str) -> str:
        try:
            return merge(standing, new)
        except InvalidInput:
            raise
        except Exception as exc:
            raise InvalidInput(f"the merge of task {task!r} raised {type(exc).__name__}: {exc}") from exc

    return merged

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR
STOP_SIDES_S = 5.0  # how long a stop waits for its cancelled side tasks
RATE_WAKE_S = 0.01  # the soonest an idle worker wakes for a rate's window to end
FINISH_TICK_S = 3.0  # how long a stop lets a schedule tick under way finish (< STOP_SIDES_S)
# A side task that a store failure ended starts again after this, doubled each time up to
# the most (the failure may stand: a permission taken away, a table locked for long).
SIDE_BACKOFF_S, SIDE_BACKOFF_MAX_S = 0.5, 30.0
# The sweep lease lasts this many sweep intervals: a holder that misses a tick keeps it.
SWEEP_LEASE_TICKS = 3
# How often a worker looks for queued runs that carry concurrency limits of a task it
# declares none for (at its start, then this often): rare (a deploy that removed a
# `rw.Limit`), so a look costs an idle deployment one read a half minute.
STRAY_LOOK_S = 30.0


class WorkerCrashed(RuntimeError):
    """A side task of the worker died; the worker stopped rather than limp on."""


class NotReady(RuntimeError):
    """The worker cannot take work now (see `Worker.check_ready`)."""


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
    # Most runs per claim; 0 means `concurrency`, and at most the store's `claim_most`
    # (200 on Redis). Defaults to 0.
    claim_batch: int = 0
    # While a backlog lasts, a batch of finishes waits at most this long for the runs still
    # going, to write them together (see engine.completer); 0: never. Defaults to 5 ms.
    finish_gather_s: float = 0.005
    orphan_check_s: float = 30.0  # how often to report runs of tasks we lack. Defaults to 30 s.
    orphan_age_s: float = 10.0  # ... that have been due this long. Defaults to 10 s.
    # A due run that no live worker can run (no worker registers its task for the major
    # that submitted it, or serves its queue) is closed `failed` (Unrunnable) once due this
    # long, by any worker's rescuer, judged by the store's clock. Defaults to 3600 s.
    unrunnable_after_s: float = 3600.0
    schedule_tick_s: float = 1.0  # how often due schedules are fired. Defaults to 1 s.
    # Retention: ended runs older than this are removed with their journal and log, by
    # one worker at a time (see engine.sweeper). Defaults to None: keep everything.
    retain_max_age_s: float | None = None
    # Retention: a run's log keeps its last this many events behind a `trimmed` marker
    # (see engine.sweeper.Retention). Defaults to None: keep every event.
    retain_max_events: int | None = None
    # Retention: a thread keeps its newest this many runs; the older ended ones go (its
    # history stays). Defaults to None: keep every run of a thread (but by max age).
    retain_thread_max_runs: int | None = None
    # Retention: the tombstones of threads deleted longer ago than this go, and their
    # names may name new threads (see engine.sweeper.Retention). Defaults to None: keep
    # them (a deleted name stays taken).
    retain_tombstone_age_s: float | None = None
    # Retention: a thread's history keeps its newest this many messages (an open run's
    # stay). Defaults to None: keep every message.
    retain_thread_max_messages: int | None = None
    sweep_interval_s: float = 60.0  # how often retention looks. Defaults to 60 s.
    # The scheduler's clock. Tests inject one (see schedules.clock_from_env). Defaults to
    # the worker's clock.
    schedule_clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.lease_s <= 3 * self.heartbeat_s / 2 and self.lease_s < 1:
            raise ConfigError(f"lease_s={self.lease_s} is too short to be renewed in time")
        if isinstance(self.queues, str):
            self.queues = [q for q in self.queues.split(",") if q]
        if not self.queues:
            raise ConfigError("a worker needs at least one queue")
        _check_settings(self)
        _ = self.retention  # a bound out of range is refused now (ConfigError)
        if not self.unrunnable_after_s > 0:
            raise ConfigError(f"unrunnable_after_s must be > 0, got {self.unrunnable_after_s}")
        if not self.sweep_interval_s > 0:
            raise ConfigError(f"sweep_interval_s must be > 0, got {self.sweep_interval_s}")
        if not self.finish_gather_s >= 0:
            raise ConfigError(f"finish_gather_s must be >= 0, got {self.finish_gather_s}")


    @property
    def retention(self) -> Retention:
        """What this worker's sweeps keep (every bound None: it never sweeps)."""
        return Retention(max_age_s=self.retain_max_age_s, max_events=self.retain_max_events,
                         thread_max_runs=self.retain_thread_max_runs,
                         tombstone_age_s=self.retain_tombstone_age_s,
                         thread_max_messages=self.retain_thread_max_messages)


def _check_settings(config: WorkerConfig) -> None:
    """Refuse what no comparison below refuses by itself: a NaN or infinite duration (a
    lease that never lapses, a wait that never ends) and a queue no store can name."""
    try:
        inputs.seconds(config.lease_s, "lease_s")
        for name in ("poll_s", "heartbeat_s", "rescue_interval_s", "worker_stale_s", "cancel_poll_s",
                     "orphan_check_s", "orphan_age_s", "schedule_tick_s", "drain_grace_s"):
            inputs.seconds(getattr(config, name), name, low_open=False)
        for queue in config.queues:
            inputs.queue(queue, "a queue")
    except InvalidInput as exc:
        raise ConfigError(str(exc)) from None


class Worker:
    """Executes the runs of `runtime.registry`'s tasks, claimed from `runtime.store`.

    `connect` makes the store ready before the first claim: the App gives its own `open`
    (which migrates or checks the schema, as it was told); by default the store is opened.
    `join_fleet` gives this process's fleet membership (the App's fleet); by default the
    worker is in no fleet.
    """

    def __init__(self, runtime: Runtime, config: WorkerConfig | None = None, *,
                 connect: Callable[[], Awaitable[object]] | None = None,
                 join_fleet: Callable[[], Awaitable[Member]] | None = None) -> None:
        self.runtime = runtime
        self.config = config or WorkerConfig()
        self.store = runtime.store
        self.clock: Clock = runtime.clock
        self.id = 0
        self._instruments = Instruments()
        self._connect = connect or runtime.store.open
        self._slots = Slots(self.config.concurrency)
        # The most runs a claim asks for: claim_batch if set, else concurrency, bounded by
        # what the store takes best in one claim (RunStore.claim_most).
        self._claim_most = self.config.claim_batch or min(
            self.config.concurrency, self.store.claim_most or self.config.concurrency)
        self._batch_written = asyncio.Event()  # set as a batch's claim (none: the batch) lands
        self._stopping = asyncio.Event()
        self._completer = Completer(self.store, on_batch=self._instruments.finish_batch,
                                    claim_along=self._claim_along, claimed=self._claimed_along,
                                    gathering=self._gathering, gather_s=self.config.finish_gather_s)
        self._tasks: list[str] = []
        self._limited: list[str] = []
        self._fair = False  # some of _limited are fair (tasks._fair)
        self._rated = False  # some of _limited declare rates (tasks._rates)
        self._majors: dict[str, list[int]] = {}  # each task: the majors whose runs it runs
        self._loops: list[asyncio.Task[None]] = []  # the side tasks and the completer, once started
        self._loop: asyncio.AbstractEventLoop | None = None  # the one `run` works in
        self._join_fleet = join_fleet
        self.member: Member | None = None

    @property
    def stats(self) -> WorkerStats:
        """This worker's counts since it started (the same calls feed the metrics)."""
        return self._instruments.stats

    @property
    def schedule_clock(self) -> Callable[[], float]:
        return self.config.schedule_clock or self.clock

    # -- lifecycle ------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Running nothing, claiming nothing, with no claimed backlog: what is queued is not
        yet due (runwright.testing skips its clock ahead only then)."""
        return self._slots.idle

    def stop(self) -> None:
        """Ask for a graceful stop: claim nothing more, drain, give back the rest."""
        self._stopping.set()

    def control_of(self, run_id: int) -> RunControl | None:
        """What this worker has learnt about a run it executes (None if it has none)."""
        active = self._slots.get(run_id)
        return None if active is None else active.control

    async def run(self, ready: Callable[[Worker], Any] | None = None) -> None:
        """Work until `stop()`; raises WorkerCrashed if a side task died."""
        self._loop = asyncio.get_running_loop()  # found once (see Completer._loop)
        await self._connect()
        self._tasks = sorted(self.runtime.registry.tasks)
        # The tasks whose runs carry concurrency limits: claimed on the store's limited path.
        specs = self.runtime.registry.tasks
        self._limited = [name for name in self._tasks if specs[name].concurrency is not None]
        self._fair = any(isinstance(specs[name].concurrency, FairLimitsOf) for name in self._limited)
        self._rated = any(getattr(specs[name].concurrency, "rates", None) for name in self._limited)
        self._majors = self.runtime.registry.runnable_majors()
        if not self._tasks:
            raise ConfigError("this app registers no task: a worker would have nothing to do")
        if self._join_fleet is not None:
            self.member = await self._join_fleet()  # the boot rules refuse a bad shape here
            self.member.on_recycle = self.stop
            self.member.lease_s = self.config.lease_s
        try:
            await self._boot_and_work(ready)
        except BaseException:
            if self.member is not None:  # a failed boot: free the slot at once, not by TTL
                await self.member.leave()
            raise

    async def _boot_and_work(self, ready: Callable[[Worker], Any] | None) -> None:
        await self._boot()
        started: list[asyncio.Task[Any]] = []  # every task of ours, as soon as it exists
        try:
            await self._start_and_work(ready, started)
        except BaseException as exc:
            # A cancel lands wherever the task running `run` waits: while it still starts
            # (saving schedules, the fleet's resync and ready, with the claim loop already
            # working), while it works, or in a stop that a side task's end began at the
            # same moment. A start that failed leaves tasks too. All of them end before
            # the App may close the store (a stop that ran its course ended them already).
            await self._abandon(started, cancelled=isinstance(exc, asyncio.CancelledError))
            raise

    async def _start_and_work(self, ready: Callable[[Worker], Any] | None,
                              started: list[asyncio.Task[Any]]) -> None:
        completer = asyncio.create_task(self._completer.run(), name="completer")
        started.append(completer)
        await through_blinks(save_schedules, self.store, self.runtime.registry.schedules.values(),
                             self.schedule_clock())
        if self.member is not None:
            await self.member.resync()
        sides = [asyncio.create_task(self._side(loop), name=loop.__name__) for loop in (
            self._claim_loop, self._lease_keeper, self._cancel_watcher, self._heartbeat, self._rescuer,
            self._scheduler, self._sweeper, self._fleet_watch, self._stray_limits)]
        started += sides
        self._loops = [completer, *sides]
        if self.member is not None:
            await self.member.ready()
        # The app's own tasks, and apart those runwright registers in every App (the
        # built-in jobs, verify's workload): `tasks=1 built_in_tasks=6` for one task.
        built_in = len(self.runtime.registry.built_in.intersection(self._tasks))
        event(INFO, "worker started", worker=self.id, queues=",".join(self.config.queues),
              concurrency=self.config.concurrency, tasks=len(self._tasks) - built_in,
              built_in_tasks=built_in,
              fleet=self.member.name if self.member is not None else "")
        if ready is not None:
            ready(self)
        stopping = asyncio.create_task(self._stopping.wait())
        started.append(stopping)
        await self._work_until_stopped(stopping, completer, sides)

    async def _work_until_stopped(self, stopping: asyncio.Task[Any], completer: asyncio.Task[None],
                                  sides: list[asyncio.Task[None]]) -> None:
        done, _ = await asyncio.wait([stopping, completer, *sides], return_when=asyncio.FIRST_COMPLETED)
        # A side task that raised, or ended although nobody asked us to stop, is a crash.
        # (The claim loop ends normally when stop() came before its first check.)
        crashed = [t for t in done if t is not stopping and (
            t.cancelled() or t.exception() is not None or not self._stopping.is_set())]
        # The store sealed by `runwright move` (or its tombstone): no crash, the deployment
        # went elsewhere; said in one line, and raised as it is (the CLI exits 9 with it).
        moved = next((t.exception() for t in crashed
                      if not t.cancelled() and isinstance(t.exception(), DeploymentMoved)), None)
        for task in crashed:
            if moved is not None:
                break
            event(ERROR, f"side task {task.get_name()} died; the worker stops",
                  exc_info=None if task.cancelled() else task.exception(), worker=self.id)
        if moved is not None:
            event(WARNING, f"{moved}; the worker stops", worker=self.id)
        self._stopping.set()
        grace_s = 0 if crashed else self.config.drain_grace_s
        if self.member is not None:
            await self.member.recycling(grace_s)
        await self._shutdown(sides, completer, grace_s=grace_s)
        if self.member is not None:
            await self.member.leave()
            self.member = None  # left: nothing more to free
        stopping.cancel()
        if moved is not None:
            raise moved
        if crashed:
            first = crashed[0]
            reason = "cancelled" if first.cancelled() else repr(first.exception())
            raise WorkerCrashed(f"side task {first.get_name()} died: {reason}")

    async def _boot(self) -> None:
        """The worker's row, its notification session and its fleet slot: independent
        round trips, made at once, so a start waits for the slowest, not for their sum.
        All of them end (done or failed) before a failure is raised, so the caller's
        clean-up sees what was made (a slot it must free)."""
        # Due work and cancels only: runs' ends and log growth, which every claim and finish
        # sends, are a follower's (a follower in this process widens it).
        steps: list[Awaitable[object]] = [self._register(), self.store.listen(runs=False)]
        if self.member is not None:
            steps.append(self.member.join())
        outcomes = await asyncio.gather(*steps, return_exceptions=True)
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:
            raise failed[0]

    async def check_ready(self, timeout_s: float = 5.0) -> None:
        """Raise NotReady unless this worker has started, is not stopping, its side tasks
        are alive, and its store answers within `timeout_s` (what /readyz reports)."""
        if not self._loops:
            raise NotReady("the worker has not started")
        if self._stopping.is_set():
            raise NotReady("the worker is stopping")
        ended = [task.get_name() for task in self._loops if task.done()]
        if ended:
            raise NotReady(f"side task {', '.join(ended)} ended")
        try:
            async with asyncio.timeout(timeout_s):
                await self.store.schema_version()
        except (StoreError, TimeoutError) as exc:
            raise NotReady(f"the store does not answer: {str(exc) or type(exc).__name__}") from None

    async def _register(self) -> None:
        # Connected already: a store that blinks now (SQLite locked by a burst of writers,
        # a failover) is ridden out, as every later write of the worker's is.
        self.id = await through_blinks(self.store.worker_register, WorkerRegisterParams(
            host=this_machine(), pid=os.getpid(), queues=list(self.config.queues),
            tasks=self._tasks, version=self.runtime.registry.version, majors=self._majors))

    async def _claims_landed(self, timeout_s: float) -> None:
        """Wait until no claim is in flight, for at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self._slots.claiming and (left := deadline - time.monotonic()) > 0:
            self._batch_written.clear()
            await wait_set(self._batch_written, left)

    async def _shutdown(self, sides: list[asyncio.Task[None]], completer: asyncio.Task[None],
                        grace_s: float) -> None:
        # Claim nothing more, but keep renewing leases and watching cancels while draining.
        claimer, others = sides[0], sides[1:]
        await halt(claimer)
        # A claim made along with a batch of finishes before the stop may still land: its
        # runs are drained as the others are, not given back as soon as they start.
        await self._claims_landed(grace_s)
        running = self._slots.tasks()
        if running and grace_s > 0:
            event(INFO, "draining", worker=self.id, running=len(running), grace_s=grace_s)
            await asyncio.wait(running, timeout=grace_s)
        rest = self._slots.runs()
        self._instruments.shut_down(drained=len(running) - len(rest), given_back=len(rest))
        for active in rest:
            active.interrupt(Stop.SHUTDOWN)
        if rest:
            event(INFO, "giving back unfinished runs", worker=self.id, runs=len(rest))
            await asyncio.wait([a.task for a in rest], timeout=5.0)
        for task in others:
            task.cancel()
        # A side task that ignores its cancel must not hold the stop forever: say so, go on.
        _, deaf = await asyncio.wait(others, timeout=STOP_SIDES_S)
        for task in deaf:
            event(ERROR, f"side task {task.get_name()} did not stop; the worker stops without it",
                  worker=self.id)
        self._completer.close()  # flushes what is pending, then returns
        await asyncio.gather(completer, return_exceptions=True)
        try:
            await self.store.worker_deregister(self.id)
        except StoreError as exc:
            event(WARNING, "could not deregister; others will find this worker dead",
                  worker=self.id, error=str(exc))
        event(INFO, "worker stopped", worker=self.id, **self.stats.logged())

    async def _abandon(self, loops: list[asyncio.Task[Any]], cancelled: bool) -> None:
        """End every task this worker started that still runs, so none goes on against a
        store that its App may close next: the task running `run` was cancelled (not
        `stop()`: no drain, no give-back), or its start failed. Its runs' claims lapse,
        as a dead worker's do, and are taken over."""
        tasks = [task for task in (*loops, *self._slots.tasks()) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_SIDES_S)
        if cancelled:
            event(INFO, "worker cancelled", worker=self.id, **self.stats.logged())

    # -- claiming -------------------------------------------------------------------

    def _claimable(self) -> list[str]:
        """This worker's queues but those paused fleet-wide, and the extra ones an op
        asked it to serve for a while (`Member.serve_extra`)."""
        if self.member is None:
            return list(self.config.queues)
        paused = self.member.paused
        mine = [queue for queue in self.config.queues if queue not in paused]
        return mine + [queue for queue in self.member.extra_queues() if queue not in mine]

    @property
    def _fleet_root(self) -> str | None:
        """The fleet whose paused queues the store's claim skips: what `_claimable` knows
        of them may be stale (a worker stopped while a pause went out)."""
        return None if self.member is None else self.member.settings.root

    def _claim_of(self, queues: list[str]) -> RunClaimParams:
        """A claim for the free slots (at most `_claim_most`), which it holds until
        `_claimed` gives them back."""
        crash_point("worker.claim_loop")
        limit = self._slots.reserve(self._claim_most)
        return RunClaimParams(self.id, queues, self._tasks, limit, self.config.lease_s, majors=self._majors,
                              fleet=self._fleet_root, limited=self._limited, fair=self._fair)

    def _claimed(self, claim: RunClaimParams, runs: list[Run] | None) -> None:
        """Start what `claim` brought (None: the store failed it), give its slots back."""
        self._slots.claimed(claim.limit, runs)
        if runs:
            crash_point("worker.after_claim")
            self._instruments.claimed_batch(len(runs))
            for run in runs:
                self._start(run)

    def _claim_along(self) -> RunClaimParams | None:
        """The claim a batch of finishes writes with it: while there is a backlog, for
        the slots free then (those runs finishing free theirs as the batch begins)."""
        if not self._slots.backlog or self._stopping.is_set() or self._slots.free <= 0:
            return None
        queues = self._claimable()
        return self._claim_of(queues) if queues else None

    def _gathering(self) -> bool:
        """A backlog, and runs of the latest claim still going: a batch of finishes may
        wait for them."""
        return self._slots.backlog and self._slots.cohort_going and not self._stopping.is_set()

    def _claimed_along(self, claim: RunClaimParams | None, runs: list[Run]) -> None:
        if claim is not None:
            self._claimed(claim, runs)
        self._batch_written.set()

    async def _claim_loop(self) -> None:
        config = self.config
        with self.store.hub.watch(QUEUED) as queued:
            while not self._stopping.is_set():
                queues = self._claimable()
                if not queues:  # every queue paused: look again at the next poll
                    await asyncio.sleep(jittered(config.poll_s))
                    continue
                # A claim along with a batch of finishes lands with it, so it needs no
                # bound on the finishes on their way; this one does (Slots.full).
                if self._slots.full:
                    self._slots.freed.clear()
                    await self._slots.freed.wait()
                    continue
                # With a backlog, a batch of finishes on its way claims for the slots
                # free by then: wait for it to land rather than claim beside it.
                if self._slots.backlog and self._completer.busy:
                    self._batch_written.clear()
                    await self._batch_written.wait()
                    continue
                queued.clear()
                claim, runs = self._claim_of(queues), None
                try:
                    runs = await self._store_call(self.store.run_claim, claim)
                finally:  # cancelled (a stop): its slots are given back all the same
                    self._claimed(claim, runs)
                if not self._slots.backlog:
                    await self._idle(queued, queues)

    async def _idle(self, queued: asyncio.Event, queues: list[str]) -> None:
        """Sleep until work may be due: a notification, the next run_at, or the poll."""
        wait_s = 0.1 if self.store.hub.degraded else jittered(self.config.poll_s)
        if not self._limited:
            next_due = await self._store_call(self.store.run_next_due_at, RunNextDueParams(
                queues, self._tasks, self._majors, self._fleet_root))
        else:
            next_due = await self._next_due_limited(queues)
        if next_due is not None:
            wait_s = max(0.0, min(wait_s, next_due - self.clock()))
        if wait_s > 0 and not queued.is_set():
            await wait_set(queued, wait_s)

    async def _next_due_limited(self, queues: list[str]) -> float | None:
        """The next due time for a worker with limited tasks: a limited run due already
        that the claim just made did not take is held back by its limit, and the end of a
        run of its key wakes this worker (QUEUED), not the clock; only a limited run due
        later sets a time, or, for rates, the end of a window."""
        unlimited = [task for task in self._tasks if task not in self._limited]
        found = []
        if unlimited:
            found.append(await self._store_call(self.store.run_next_due_at, RunNextDueParams(
                queues, unlimited, self._majors, self._fleet_root, runs="unlimited")))
        later = await self._store_call(self.store.run_next_due_at, RunNextDueParams(
            queues, self._limited, self._majors, self._fleet_root, runs="limited_later"))
        if later is not None and later > self.clock():
            found.append(later)
        if self._rated:
            # A run held by its rate may start when a window ends: no run's time, and no
            # run's end, says when (a start that fills a window wakes nobody at its end).
            # Not sooner than RATE_WAKE_S, though: a window that ends every millisecond
            # (a busy rate) must not spin this loop.
            ended = await self._store_call(self.store.run_next_due_at, RunNextDueParams(
                queues, self._limited, runs="rate_end"))
            if ended is not None:
                found.append(max(ended, self.clock() + RATE_WAKE_S))
        due = [when for when in found if when is not None]
        return min(due) if due else None

    def _start(self, run: Run) -> None:
        self._instruments.claimed(run)
        assert self._loop is not None, "a run is started by the claim loop, which run() starts"
        self._slots.start(run, self._loop.create_task(self._execute(run), name=f"run-{run.id}"))

    # -- executing ------------------------------------------------------------------

    async def _execute(self, run: Run) -> None:
        event(DEBUG, "run started", run_id=run.id, attempt=run.attempt, worker=self.id,
              task=run.task, fence=run.fence)
        active = self._slots.get(run.id)
        assert active is not None, "its task starts after Slots.start, and no newer attempt before it ends"
        began = time.monotonic()
        with self._instruments.attempt_span(run, self.id) as span:
            try:
                active.control.interrupt = run.interrupt
                finish = await run_attempt(self.runtime, run, self.id, lambda: active.stop, active.control)
                if finish is None:
                    self._instruments.lease_lost(span)
                    return
                crash_point("worker.before_finish")
                finish.alone = run.parent_id is None and run.thread is None
                finish.limited = run.limits is not None
                with self._slots.finishing(active):
                    await self._completer.finish(finish)
                self._instruments.finished(run, finish, time.monotonic() - began, self.id, span)
            except LeaseLost as exc:
                self._instruments.lease_lost(span)
                event(WARNING, f"write refused: {exc}; run abandoned to its new owner",
                      run_id=run.id, attempt=run.attempt, worker=self.id, fence=run.fence)
            finally:
                self._slots.end(active)

    # -- side tasks -----------------------------------------------------------------

    async def _stray_limits(self) -> None:
        """Queued runs that carry concurrency limits, of a task this worker declares none
        for (a deploy removed its `rw.Limit`; a submitter runs other code), are claimed only
        on the limited path: without this look no worker of the new code would claim them,
        ever. Once seen, the task's runs are claimed there, under the limits they carry (a
        run of it without limits is claimed as any), for as long as this worker runs."""
        declared = set(self._limited)
        while True:
            others = [task for task in self._tasks if task not in self._limited]
            if others:
                found = await self._store_call(self.store.run_limited_tasks,
                                               RunLimitedTasksParams(list(self.config.queues), others))
                if found:
                    self._limited = sorted(set(self._limited) | set(found))
                    self._rated = True  # they may carry rates too: wake for their windows
                    event(INFO, "claiming runs queued with concurrency limits their task no longer declares",
                          worker=self.id, tasks=",".join(sorted(set(found) - declared)))
            await asyncio.sleep(jittered(STRAY_LOOK_S))

    async def _lease_keeper(self) -> None:
        """Renew leases of live runs; a run whose fence was superseded is abandoned."""
        while True:
            await asyncio.sleep(jittered(self.config.lease_s / 4))
            runs = [(a.run.id, a.run.fence) for a in self._slots.runs()]
            if not runs:
                continue
            result = await self._store_call(self.store.run_extend, RunExtendParams(
                self.id, runs, self.config.lease_s))
            if result is None:
                self._instruments.renewed(0, failed=len(runs))
            else:
                self._instruments.renewed(len(runs) - len(result.lost), failed=0)
                self._apply(result.lost, Stop.LEASE_LOST)
                self._apply(result.cancel_requested, Stop.CANCEL)

    async def _cancel_watcher(self) -> None:
        """Stop runs whose cancel was requested: woken by notifications, with a short poll."""
        with self.store.hub.watch(CANCEL) as requested:
            while True:
                await wait_set(requested, jittered(self.config.cancel_poll_s))
                requested.clear()
                run_ids = self._slots.run_ids()
                if not run_ids:
                    continue
                runs = await self._store_call(self.store.run_get_many, run_ids)
                for run in runs or ():
                    active = self._slots.get(run.id)
                    if active is None:
                        continue
                    if run.fence != active.run.fence or run.state is not RunState.RUNNING:
                        self._interrupt(active, Stop.LEASE_LOST)
                    elif run.cancel_requested:
                        active.interrupt(Stop.CANCEL)
                    elif run.interrupt:
                        active.control.request_interrupt(run.interrupt)
                    elif run.pause_requested != active.control.pause:
                        # Asked to pause (app.pause), or not any more (a resume before
                        # its next step boundary withdrew it).
                        active.control.pause = run.pause_requested
                        event(INFO, "pause requested: the run stops at its next step boundary"
                              if run.pause_requested else "pause withdrawn", run_id=run.id,
                              attempt=run.attempt, worker=self.id)
                await asyncio.sleep(0.05)  # SQLite wakes us on every commit: don't spin

    def _apply(self, run_ids: list[int], why: Stop) -> None:
        for run_id in run_ids:
            active = self._slots.get(run_id)
            if active is not None:
                self._interrupt(active, why)

    def _interrupt(self, active: Active, why: Stop) -> None:
        # A loss is counted once, by whichever check (renewal or re-read) found it first.
        if why is Stop.LEASE_LOST and active.stop is None and not active.finishing:
            self._instruments.lease_found_lost()
        active.interrupt(why)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(jittered(self.config.heartbeat_s))
            alive = await self._store_call(self.store.worker_heartbeat, WorkerHeartbeatParams(self.id))
            if alive is False:
                # Declared dead (stalled too long, or our session dropped): our runs were or
                # will be taken over, and their writes refused by the fence. Come back fresh.
                old = self.id
                await self._register()
                event(WARNING, "registration lost; registered again", worker=self.id, previous=old)
                # Claims made meanwhile were refused, and the notifications that woke
                # them are spent: a limited run held for its limit waits for one, not for
                # its due time (_next_due_limited), so it would wait for the poll.
                self.store.hub.fire(QUEUED)

    async def _rescuer(self) -> None:
        """Take back runs of dead workers and expired leases (every worker does this)."""
        config = self.config
        rescuer = Rescuer(self.store, config.queues, self.runtime.registry.tasks,
                          RunRescueParams(config.max_recoveries, config.worker_stale_s),
                          config.orphan_check_s, config.orphan_age_s, self.clock,
                          on_unrunnable=self._instruments.unrunnable,
                          unrunnable_after_s=config.unrunnable_after_s,
                          on_closed=self._instruments.unrunnable_closed)
        while True:
            # Woken when a worker's session ends (PostgreSQL), else at the next poll, or
            # when an unrunnable run comes due to close, if that is sooner.
            wait_s = min(jittered(config.rescue_interval_s), rescuer.next_look_in())
            await self.store.worker_watch(WorkerWatchParams(self.id, wait_s))
            taken: list[Run] = []
            await rescuer.tick(self.id, taken.append)
            for run in taken:
                await self._rescued(run)

    async def _rescued(self, run: Run) -> None:
        """A run taken over from a lost worker. When traced, its lost claim's journal is
        read, so that the spans of the steps that claim completed reach the trace even if
        its worker died before exporting them (see telemetry.steps_lost)."""
        journal = await self._store_call(self.store.step_list, run.id) if telemetry.active() else None
        self._instruments.rescued(run, self.id, journal or ())

    async def _scheduler(self) -> None:
        """Fire due schedules (every worker does this: no leader to lose)."""
        scheduler = Scheduler(self.store, self.schedule_clock, self.runtime.registry.version,
                              flow=self._flow_of)
        while True:
            await asyncio.sleep(jittered(self.config.schedule_tick_s))
            # A stop lets a tick under way finish (for up to FINISH_TICK_S): a fire's run
            # and the move of its schedule's next fire time are two writes, and a fleet
            # stopped gracefully leaves no fire half made behind a paused schedule.
            tick = asyncio.ensure_future(self._store_call(scheduler.tick))
            try:
                await asyncio.shield(tick)
            except asyncio.CancelledError:
                if not tick.done():
                    await asyncio.wait([tick], timeout=FINISH_TICK_S)
                    tick.cancel()  # past the bound: as after a crash, the next tick repeats it
                raise

    def _flow_of(self, task: str, args: str) -> RunInsertParams | None:
        """A run of `task` that a schedule fires (no tenant), as a submission of its stored
        arguments makes it: its concurrency limits, rates, fair key and flow control (with
        a debounce's merge or a batch's append); None when the task declares none."""
        spec = self.runtime.registry.tasks.get(task)
        if spec is None or (spec.concurrency is None and spec.flow is None):
            return None
        arguments = load(args)
        if spec.batch_items is not None:  # a batched task's keys are of its (one) item
            arguments = arguments[spec.batch_items][0]
        made = insert_params(spec, arguments, Submission(), now_s=self.clock(), limits=self.runtime.limits)
        if made.merge is not None:
            made.merge = _refusing(made.merge, task)
        return made

    async def _sweeper(self) -> None:
        """Retention, when configured: one worker at a time sweeps (see engine.sweeper)."""
        config = self.config
        if config.retention.keeps_everything:
            await self._stopping.wait()  # keep everything: nothing to do, ever
            return
        # The lease outlives two ticks, so a holder that misses one keeps it; a dead
        # holder's lease lapses and the next worker to tick takes over.
        sweeper = Sweeper(self.store, self.clock, config.retention,
                          holder=f"{this_machine()}:{os.getpid()}:{self.id}",
                          lease_s=SWEEP_LEASE_TICKS * config.sweep_interval_s,
                          codecs=self.runtime.limits.codecs)
        while True:
            await self._store_call(sweeper.tick)
            await asyncio.sleep(jittered(config.sweep_interval_s))

    async def _fleet_watch(self) -> None:
        """The fleet heartbeat, supervised like the others (idle when in no fleet)."""
        if self.member is None:
            await asyncio.Event().wait()
        else:
            await self.member.watch()

    async def _side(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a side task; a store failure that escaped its own calls (`is_store_failure`)
        is logged and the task starts again after a backoff: no store error stops a worker.
        Anything else, a bug of ours, ends the task, and the worker stops, loudly (see
        _boot_and_work)."""
        backoff_s = SIDE_BACKOFF_S
        while True:
            started_at = time.monotonic()
            try:
                await loop()
                return
            except Exception as exc:
                if not is_store_failure(exc):
                    raise
                if time.monotonic() - started_at > SIDE_BACKOFF_MAX_S:
                    backoff_s = SIDE_BACKOFF_S  # it ran a while since the last failure: a new one
                event(WARNING, "side task met a store error; it goes on", worker=self.id,
                      task=loop.__name__, error=f"{type(exc).__name__}: {exc}",
                      retry_in_s=round(backoff_s, 2))
                await asyncio.sleep(jittered(backoff_s))
                backoff_s = min(SIDE_BACKOFF_MAX_S, backoff_s * 2)

    async def _store_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await store_call(fn, *args, worker=self.id)
