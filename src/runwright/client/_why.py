"""Why a run is not running: one judgement behind every face that says it, the runs
lists of the CLI, HTTP and the dashboard (`Waiting`, filterable), and a wait that timed
out (`result(timeout_s=)`, `runwright submit --wait`: `why_not_ended`).

What a queued run waits on is read where it is recorded. Before it is due, the store keeps
what the attempt that gave its slot back said (`Run.waiting`: a durable sleep, a person's
answer, its children, a rate limit, a retry's backoff; nothing: submitted for later).
Once due it waits on the world, read when asked: its thread's earlier open runs, the live
workers (none serves its task and queue, or none runs its app's major), else a free slot.
A list reads those facts once for all its runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..core._clock import utc
from ..core._versions import major_of
from ..runs import Run, RunState, WaitReason
from ..store._limit_rules import parsed, slot
from ..store._params import LimitUse, WorkerInfo
from ..store._rate_rules import next_at, rates_in

__all__ = ["SCAN_LIMIT", "SCAN_PAGE", "Waiting", "WhyAccess", "live_workers_serving", "utc", "waiting_of",
           "why_not_ended"]

# How many due runs a list filtered by what only the world can tell (worker, version,
# thread, slot) reads to fill its page, newest first.
SCAN_LIMIT = 2000
SCAN_PAGE = 200
THREAD_LOOKS = 50  # threads of one list whose order is read; past them a run reads "slot"


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a queued run is not running: `reason`, until when if a time decides it, and one
    line saying it."""

    reason: WaitReason
    until: float | None
    detail: str


class WhyAccess(Protocol):
    """What the judgement reads, through the scope the caller reads in."""

    def now(self) -> float: ...

    async def list_workers(self) -> list[WorkerInfo]: ...

    async def list_runs(self, *, states: Sequence[RunState] = (), thread: str | None = None,
                        limit: int = ...) -> list[Run]: ...

    async def unrunnable_kinds(self) -> list[tuple[str, str, int | None, int]]: ...

    async def limit_uses(self) -> list[LimitUse]: ...


def live_workers_serving(workers: list[WorkerInfo], task: str, queue: str, now: float) -> list[WorkerInfo]:
    """The registered workers with a fresh heartbeat (by the store's clock) that claim
    `task` on `queue`. A worker killed outright stays registered until another declares
    it dead, so registration alone is not life: a heartbeat older than a worker's default
    `worker_stale_s` is not counted."""
    from ..engine._worker import WorkerConfig  # the engine's default, read when asked

    stale_before = now - WorkerConfig().worker_stale_s
    return [worker for worker in workers
            if worker.heartbeat_at >= stale_before and task in worker.tasks and queue in worker.queues]


def _recorded(run: Run) -> Waiting:
    """A queued run not yet due: what its last attempt recorded, else submitted for later."""
    at = utc(run.run_at)
    match run.waiting:
        case WaitReason.SLEEP:
            return Waiting(WaitReason.SLEEP, run.run_at, f"it sleeps (ctx.sleep) until {at}")
        case WaitReason.ANSWER:  # run_at is only when it looks again
            return Waiting(WaitReason.ANSWER, None, "it waits for a person's answer to its question "
                                                    "(runwright questions; app.answer)")
        case WaitReason.SIGNAL:  # run_at is its timeout, or when it looks again
            return Waiting(WaitReason.SIGNAL, None, "it waits for a signal (ctx.wait_signal; send one with "
                                                    "run.signal or runwright signal) or an event "
                                                    "(ctx.wait_event; runwright publish)")
        case WaitReason.CHILDREN:
            return Waiting(WaitReason.CHILDREN, None, "it waits for its child runs to end")
        case WaitReason.RATE_LIMIT:
            return Waiting(WaitReason.RATE_LIMIT, run.run_at,
                           f"it waits out a model's rate limit, shared by the fleet, until {at}")
        case WaitReason.THROTTLE:
            return Waiting(WaitReason.THROTTLE, run.run_at,
                           f"a throttle of its key (rw.Throttle) made it due at {at}")
        case WaitReason.PAUSED:  # run_at is far ahead: nothing but a resume makes it due
            return Waiting(WaitReason.PAUSED, None, "it is paused: resume it (runwright resume; "
                                                    "app.resume) or cancel it")
        case WaitReason.RETRY:  # a queued run's attempt is the one it waits to start
            return Waiting(WaitReason.RETRY, run.run_at,
                           f"attempt {run.attempt - 1} failed; attempt {run.attempt} of "
                           f"{run.max_attempts} starts at {at}")
    return Waiting(WaitReason.SCHEDULED, run.run_at, f"it is due at {at}")


class _World:
    """The facts a due run's wait is judged on, each read once, when first needed."""

    def __init__(self, scope: WhyAccess, now: float) -> None:
        self.scope, self.now = scope, now
        self._workers: list[WorkerInfo] | None = None
        self._kinds: list[tuple[str, str, int | None, int]] | None = None
        self._open: dict[str, list[Run] | None] = {}
        self._uses: dict[str, LimitUse] | None = None

    async def held_by(self, run: Run) -> list[LimitUse]:
        """The concurrency limits of `run` that are full now (the store's count of the
        runs running under each of its keys, against the max a claim applies)."""
        if not run.limits:
            return []
        uses = await self._limit_uses()
        found = [uses.get(slot(name, key)) for name, key, _ in parsed(run.limits)]
        return [use for use in found if use is not None and use.running >= use.max]

    async def _limit_uses(self) -> dict[str, LimitUse]:
        if self._uses is None:
            self._uses = {slot(use.name, use.key): use for use in await self.scope.limit_uses()}
        return self._uses

    async def rate_held(self, run: Run) -> list[tuple[LimitUse, float, float | None]]:
        """The rates of `run` whose window has no room for its cost now: each with the
        cost and when it may start (None: never, while the max is what it is)."""
        mine = rates_in(run.limits)
        if not mine:
            return []
        uses = await self._limit_uses()
        out = []
        for name, key, _max, _per_s, cost in mine:
            use = uses.get(slot(name, key))
            if use is not None:
                when = next_at(use.spends, use.max, cost, self.now)
                if when is None or when > self.now:
                    out.append((use, cost, when))
        return out

    async def ahead_on_thread(self, run: Run) -> int | None:
        """The first run that goes before `run` on its thread, if any."""
        assert run.thread is not None
        if run.thread not in self._open:
            self._open[run.thread] = None if len(self._open) >= THREAD_LOOKS else await self.scope.list_runs(
                states=[RunState.QUEUED, RunState.RUNNING], thread=run.thread, limit=100)
        others = self._open[run.thread] or []
        ahead = [other.id for other in others
                 if other.id != run.id and (other.state is RunState.RUNNING or other.started_at is not None
                                            or other.id < run.id)]
        return min(ahead) if ahead else None

    async def served(self, run: Run) -> bool:
        if self._workers is None:
            self._workers = await self.scope.list_workers()
        return bool(live_workers_serving(self._workers, run.task, run.queue, self.now))

    async def unrunnable(self, run: Run, major: int | None) -> bool:
        """Served, but not for the major of the app version that submitted it (the store's
        own judgement, as the rescuer's that closes such a run)."""
        if self._kinds is None:
            self._kinds = await self.scope.unrunnable_kinds()
        return any(queue == run.queue and task == run.task and (kind_major is None or kind_major == major)
                   for queue, task, kind_major, _count in self._kinds)

    async def judge(self, run: Run) -> Waiting:
        if run.thread is not None:
            first = await self.ahead_on_thread(run)
            if first is not None:
                return Waiting(WaitReason.THREAD, None,
                               f"it waits its turn on thread {run.thread!r}: run {first} goes first")
        if not await self.served(run):
            return Waiting(WaitReason.WORKER, None,
                           f"no live worker runs task {run.task!r} on queue {run.queue!r}: start one "
                           f"(runwright worker MODULE:APP --queues {run.queue})")
        major = None if run.version is None else major_of(run.version)
        if await self.unrunnable(run, major):
            return Waiting(WaitReason.VERSION, None,
                           f"no live worker can run it: the workers serving task {run.task!r} on queue "
                           f"{run.queue!r} do not run major {major} (the app version {run.version} "
                           f"submitted it); it is closed failed (Unrunnable) once due for their "
                           f"--unrunnable-after-s")
        full = await self.held_by(run)
        if full:
            said = "; ".join(f"limit {use.name!r} of key {use.key!r} has {use.running} of {use.max} running"
                             for use in full)
            return Waiting(WaitReason.LIMIT, None,
                           f"it waits for its concurrency limit: {said} (it starts, in its order, as "
                           f"one of them ends)")
        rated = await self.rate_held(run)
        if rated:
            whens = [when for _, _, when in rated]
            until = None if None in whens else max(w for w in whens if w is not None)
            said = "; ".join(
                f"rate {use.name!r} of key {use.key!r} has {use.spent:g} of {use.max} started in its "
                f"{use.per_s:g} s window, and it costs {cost:g}"
                + (" (over the max: it starts only once the max is raised)" if when is None else "")
                for use, cost, when in rated)
            return Waiting(WaitReason.RATE, until,
                           f"it waits for its rate: {said}"
                           + ("" if until is None else f"; it may start at {utc(until)}"))
        return Waiting(WaitReason.SLOT, None,
                       f"it is due and waits for a free slot of the workers serving queue {run.queue!r}")


async def waiting_of(scope: WhyAccess, runs: Sequence[Run]) -> dict[int, Waiting]:
    """Why each queued run of `runs` is not running (other runs are not in the answer)."""
    now = scope.now()
    world = _World(scope, now)
    out: dict[int, Waiting] = {}
    for run in runs:
        if run.state is RunState.QUEUED:
            out[run.id] = _recorded(run) if run.run_at > now else await world.judge(run)
    return out


async def why_not_ended(scope: WhyAccess, run: Run) -> str:
    """What `run` (as just read) is waiting for, in one clause."""
    if run.state is RunState.RUNNING:
        return f"it is running (attempt {run.attempt} of {run.max_attempts}, worker {run.owner})"
    if run.state is not RunState.QUEUED:
        return f"it is {run.state.value}"
    return (await waiting_of(scope, [run]))[run.id].detail

