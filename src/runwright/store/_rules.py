"""The rulebook: what happens to runs, decided once for every backend.

A backend reads what a decision needs (under its lock, in its transaction or script),
asks a rule here, and applies the answer atomically in its own dialect, the way River's
rescuer decides a job's fate and its driver applies it. Nothing here touches a database.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Sequence

from ..core._journal import SNAPSHOT, StepRecord
from ..core._questions import Question, check_answer
from ..core._signals import Signal
from ..errors import (
    AlreadyAnswered,
    InvalidInput,
    KeyConflict,
    LeaseLost,
    QuestionNotFound,
    RunEnded,
    RunNotFound,
    RunNotPaused,
    RunNotRetryable,
    SchemaError,
    SignalsFull,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
)
from ..runs import (
    PAUSED_RUN_AT,
    RETRYABLE_STATES,
    STORED_WAITS,
    Run,
    RunState,
    WaitReason,
    check_transition,
)
from ._params import (
    ON_BUSY,
    BucketTakeParams,
    QuestionAnswerParams,
    QuestionOpenParams,
    RunForkParams,
    RunInsertParams,
    RunListParams,
    SignalSendParams,
    StepRecordParams,
    ThreadInfo,
    UnrunnableKind,
    WorkerInfo,
)

__all__ = [
    "REQUEUE_STOPS",
    "RETRYABLE",
    "TRIMMED",
    "BucketTake",
    "BusyPlan",
    "CancelPlan",
    "PAUSED",
    "PAUSED_AT",
    "PauseAction",
    "Rescue",
    "StopRequest",
    "answered_event",
    "can_run",
    "check_one_step_per_run",
    "check_parents_fenced",
    "fenced_parents",
    "claim_keys",
    "asked_event",
    "BORN_CANCELLED_EVENT",
    "CANCELS_CHILDREN",
    "born_cancelled",
    "born_cancelled_error",
    "born_cancelled_run",
    "cancelled_error",
    "check_schema_known",
    "check_schema_current",
    "check_fork",
    "check_retry_on_thread",
    "fork_end",
    "forked_event",
    "check_retryable",
    "retried_event",
    "check_thread_readable",
    "deadline_error",
    "interrupted_error",
    "NO_TRANSACTIONS",
    "list_conditions",
    "merge_ranges",
    "plan_answer",
    "plan_busy",
    "plan_cancel",
    "plan_pause",
    "plan_resume",
    "resumed_run_at",
    "rescue_fate",
    "retry_drops",
    "runs_beyond_thread_cap",
    "step_event",
    "take_from_bucket",
    "thread_turn",
    "trim_marker",
    "submitted_event",
    "turn_ahead",
    "unrunnable_error",
    "unrunnable_kinds",
    "worker_lost_error",
]

QUEUED, RUNNING = RunState.QUEUED, RunState.RUNNING


# -- the error payloads a store writes on its own -------------------------------------


def deadline_error() -> str:
    return json.dumps({"type": "DeadlineExceeded",
                       "message": "the run's deadline passed before it ended"})


def worker_lost_error(recoveries: int) -> str:
    return json.dumps({
        "type": "WorkerLost",
        "message": f"its worker was lost {recoveries} times; a run that keeps killing its "
                   f"workers goes to the dead-letter queue",
    })


def cancelled_error(reason: str = "cancelled on request") -> str:
    return json.dumps({"type": "Cancelled", "message": reason})


def interrupted_error() -> str:
    return json.dumps({"type": "Interrupted", "message": "interrupted by a newer run on its thread"})


def check_one_step_per_run(params: Sequence[StepRecordParams]) -> None:
    """A batch of journal writes holds one per run: each bumps its run's last seq once,
    and two of one run would race for the same seq."""
    if len({p.run_id for p in params}) != len(params):
        raise ValueError("step_record_many: one step per run in a batch")


def step_event(position: int, name: str, status: str, error: str | None) -> str:
    """The data of the `step` event that logs a journal write (the result stays in the
    journal; the event names only the error's type)."""
    data: dict[str, object] = {"position": position, "name": name, "status": status}
    if error is not None:
        data["error"] = json.loads(error).get("type")
    return json.dumps(data)


def submitted_event(run: Run) -> str:
    """The data of event 1 of every run's log."""
    return json.dumps({"task": run.task, "key": run.key, "queue": run.queue,
                       "priority": run.priority, "parent": run.parent_id, "thread": run.thread})


def unrunnable_error(task: str, major: int | None, due_for_s: float) -> str:
    """Why a run that no live worker could run was closed `failed`."""
    of = f"task {task!r}" if major is None else f"task {task!r} at major {major}"
    return json.dumps({"type": "Unrunnable", "task": task, "major": major,
                       "message": f"no live worker could run {of} (none registers the task for "
                                  f"that major, or serves its queue); it was due for more than "
                                  f"{due_for_s:g} s (unrunnable_after_s)"})


# -- which worker may run which run -----------------------------------------------------


def claim_keys(majors: Mapping[str, Sequence[int]]) -> list[str]:
    """What a claim matches a run's (major, task) against: "<major>:<task>" (the major, an
    integer, ends at the first colon, so any task name is kept apart)."""
    return [f"{major}:{task}" for task, task_majors in sorted(majors.items()) for major in task_majors]


def can_run(worker: WorkerInfo, queue: str, task: str, major: int | None) -> bool:
    """Whether `worker` would claim a run of `task` in `queue` that recorded `major`: it
    serves the queue and registers the task, for that major (a run that recorded none is
    any major's; a worker that registered no majors, from before they were recorded, runs
    any major)."""
    if queue not in worker.queues or task not in worker.tasks:
        return False
    if major is None or worker.majors is None:
        return True
    return major in worker.majors.get(task, ())


def unrunnable_kinds(kinds: Sequence[UnrunnableKind], workers: Sequence[WorkerInfo]) -> list[UnrunnableKind]:
    """Of the due runs by (queue, task, major), those that no live worker can run."""
    return [kind for kind in kinds
            if not any(can_run(worker, kind[0], kind[1], kind[2]) for worker in workers)]


# -- the attempt a run is on -------------------------------------------------------------

# One meaning of `attempt` everywhere (the run record, the `started` event, spans, logs,
# the API, the CLI, the dashboard): which of its `max_attempts` tries the run is on,
# from 1; 0 until its first claim (and again after a manual retry, until it is claimed).
# Each backend applies it in its dialect:
# - a claim makes it at least 1 and never raises it: a takeover, a give-back and a park
#   continue the attempt they interrupted in a new claim (a new fence);
# - a retry (an end that re-queues the run for its backoff, not a release) moves it on to
#   the next attempt, which the run then waits for: "attempt 2 of 4, due in 4 s";
# - a takeover and a release keep it; a manual retry resets it to 0 (fresh attempts).
# A claim is told apart by its fence: a run's attempts list has one row per claim, each
# with the attempt it served.


# -- an attempt's end that meets a stop request ---------------------------------------


@dataclass(frozen=True, slots=True)
class StopRequest:
    """A request standing on a running run that turns a requeue (a retry, a park, a
    give-back) into an end, so that it is never lost to a run finishing as it came."""

    flag: str  # the Run field that carries it
    ends_as: RunState
    error: str


# In order of precedence: a cancel wins over an interrupt.
REQUEUE_STOPS = (
    StopRequest("cancel_requested", RunState.CANCELLED, cancelled_error()),
    StopRequest("interrupt", RunState.INTERRUPTED, interrupted_error()),
)


# -- the busy policy of a thread --------------------------------------------------------


@dataclass(slots=True)
class BusyPlan:
    """What a submission to a thread does to the thread's open runs."""

    mode: str | None = None  # "interrupt" or "rollback" when runs are to be stopped
    ask_to_stop: list[int] = field(default_factory=list)  # running: stop at the next step
    end_now: list[int] = field(default_factory=list)  # begun and between attempts (parked...)
    # The new run's place in its thread's order (`thread_turn`), when it goes ahead of runs
    # already waiting; None: its id, after every run before it.
    turn: float | None = None

    @property
    def drops_history(self) -> bool:
        return self.mode == "rollback"


def thread_turn(run: Run, turns: Mapping[int, float]) -> float:
    """A run's place in its thread's order: its id, unless it was submitted ahead of runs
    already waiting (an interrupt), then the place it was given (`turns`, by run id). Runs
    of a thread are claimed, and their messages read as history, in (turn, id) order."""
    return turns.get(run.id, float(run.id))


def _has_begun(run: Run) -> bool:
    """Running, or between attempts of a run that started (parked on a timer, its children
    or a person, backing off, given back): the thread's current run, not a waiting one."""
    return run.state is RUNNING or run.started_at is not None


def plan_busy(thread: str, open_runs: Sequence[Run], on_busy: str,
              asking: Collection[int] = (), turns: Mapping[int, float] | None = None) -> BusyPlan:
    """reject: ThreadBusy while a run is open; enqueue (and steer, which the store treats
    as enqueue): the new run waits its turn (the claim never overlaps two runs of a
    thread); interrupt/rollback: the thread's current run stops (a running one at its
    next step boundary, one between attempts now) and ends `interrupted`; the new run
    goes next, ahead of the runs already waiting (never started), which keep their order
    and run after it, untouched (`BusyPlan.turn`).

    A run parked on a question to a person (its id in `asking`) does not make the thread
    busy: the next message to the thread is the person's word, whatever `on_busy` says.
    When every open run is such a run, they end `interrupted` now (their questions close
    with them; with rollback, their additions to the thread are dropped) and the new run
    goes next, seeing the history up to the question.

    `turns`: the places of open runs submitted ahead of others (see `thread_turn`)."""
    if on_busy not in ON_BUSY:
        raise InvalidInput(f"on_busy must be one of {', '.join(ON_BUSY)}, got {on_busy!r}")
    waiting = [r.id for r in open_runs if r.state is QUEUED and r.id in asking]
    if waiting and len(waiting) == len(open_runs):
        return BusyPlan(mode="rollback" if on_busy == "rollback" else "interrupt", end_now=waiting)
    if not open_runs or on_busy in ("enqueue", "steer"):  # steer: see agents/_steering.py
        return BusyPlan()
    if on_busy == "reject":
        raise ThreadBusy(thread, open_runs[0].id, open_runs[0].state.value)
    return BusyPlan(mode=on_busy,
                    ask_to_stop=[r.id for r in open_runs if r.state is RUNNING],
                    end_now=[r.id for r in open_runs if r.state is QUEUED and _has_begun(r)],
                    turn=turn_ahead(open_runs, turns or {}))


def turn_ahead(open_runs: Sequence[Run], turns: Mapping[int, float]) -> float | None:
    """The place of a run that goes ahead of the thread's waiting runs (queued, never
    started): halfway between the first of them and the open run just before it, so that
    it runs after the current run and before them; None when none waits. A second
    interrupt while the first still waits goes ahead of it too: each newest message is
    the next one answered."""
    waiting = [thread_turn(r, turns) for r in open_runs if r.state is QUEUED and not _has_begun(r)]
    if not waiting:
        return None
    first = min(waiting)
    before = [thread_turn(r, turns) for r in open_runs if thread_turn(r, turns) < first]
    return (max(before) + first) / 2 if before else first - 0.5


# -- cancelling a run and its descendants -----------------------------------------------


@dataclass(slots=True)
class CancelPlan:
    ask_to_stop: list[int] = field(default_factory=list)  # running: its owner stops it
    end_now: list[Run] = field(default_factory=list)  # queued: cancelled at once


def plan_cancel(run: Run, descendants: Sequence[Run]) -> CancelPlan:
    """Cancel `run` (RunEnded if it already ended) and every open descendant."""
    if run.state is not RUNNING:
        check_transition(run.id, run.state, RunState.CANCELLED)
    plan = CancelPlan()
    for member in (run, *descendants):
        if member.state is RUNNING and not member.cancel_requested:
            plan.ask_to_stop.append(member.id)
        elif member.state is QUEUED:
            plan.end_now.append(member)
    return plan


# -- pausing and resuming a run ----------------------------------------------------------

# A paused run is queued, waits on "paused" and is due at PAUSED_AT (for SQL and Lua).
PAUSED = WaitReason.PAUSED.value
PAUSED_AT = repr(PAUSED_RUN_AT)


class PauseAction:
    """What a pause or a resume does to the run it is asked of."""

    NOTHING = "nothing"  # already so: pausing is idempotent
    HOLD = "hold"  # queued: paused now (not claimed, not woken)
    REQUEST = "request"  # running: asked to stop at its next step boundary
    RELEASE = "release"  # paused: due again
    WITHDRAW = "withdraw"  # running and asked to pause: the request is taken back


def plan_pause(run: Run) -> str:
    """A queued run is held now, wherever it waits (not yet started, on a timer, a
    person, a signal, its children, a backoff); a running run is asked to stop at its
    next step boundary, where it gives its slot back and is held, its journal kept (an
    end of its attempt that would requeue it, a park or a retry, pauses it instead; one
    that ends it, a success or a failure, ends it: the pause came too late). An ended
    run is RunEnded. Pausing a paused run (or one asked to) changes nothing.

    The clocks: a deadline keeps running (a paused run whose deadline passes ends
    `failed`, as any queued run), and so does a durable timer, whose wake is held until
    the resume (the run replays and sleeps only what is left, if anything)."""
    if run.done:
        raise RunEnded(f"run {run.id} already ended {run.state.value}; it cannot be paused")
    if run.state is QUEUED:
        return PauseAction.NOTHING if run.waiting == PAUSED else PauseAction.HOLD
    return PauseAction.NOTHING if run.pause_requested else PauseAction.REQUEST


def plan_resume(run: Run) -> str:
    """A paused run comes due (`resumed_run_at`) with a fresh round of attempts, as a
    manual retry gives: a run paused when its attempts ran out (on_exhausted="pause")
    runs its failing step again, on whatever code is deployed then. A running run still
    asked to pause is not paused after all. Anything else is RunNotPaused (RunEnded once
    ended), and nothing changes."""
    if run.done:
        raise RunEnded(f"run {run.id} already ended {run.state.value}; it cannot be resumed")
    if run.state is QUEUED and run.waiting == PAUSED:
        return PauseAction.RELEASE
    if run.state is RUNNING and run.pause_requested:
        return PauseAction.WITHDRAW
    raise RunNotPaused(run.id, run.state.value, run.done)


def resumed_run_at(run: Run, held_run_at: float | None, now: float) -> float:
    """When a resumed run is due: now, if it ever started (it replays its journal, and
    waits again for what is still to come: the rest of a sleep, an answer not yet given);
    a run paused before it ever started keeps the time it was submitted for."""
    if run.started_at is not None or held_run_at is None:
        return now
    return max(held_run_at, now)


# -- a child submitted into a cancelled family -------------------------------------------


# A parent in one of these states, or with a cancel requested, has its new children born
# `cancelled` (for SQL and Lua; see `born_cancelled`).
CANCELS_CHILDREN = (RunState.CANCELLED.value,)
BORN_CANCELLED_EVENT = {"reason": "its parent was cancelled"}  # the `cancelled` event's data


def born_cancelled_error() -> str:
    return cancelled_error("its parent was cancelled")


def fenced_parents(params: Iterable[RunInsertParams]) -> list[tuple[int, int]]:
    """The (parent id, fence) each child of a batch was submitted under (see
    RunInsertParams.parent_fence), once each: what the insert checks before it writes."""
    return sorted({(p.parent_id, p.parent_fence) for p in params
                   if p.parent_id is not None and p.parent_fence is not None})


def check_parents_fenced(pairs: Iterable[tuple[int, int]],
                         running_at: Mapping[int, int | None]) -> None:
    """Raise LeaseLost (the batch writes nothing) unless each parent is running at the fence
    its child was submitted under; `running_at` is each parent's fence if it is running,
    None (or absent) if it is not, or is gone. Read in the insert's own transaction or
    script: a zombie's child is never made, nor one for a family cancelled or removed."""
    for parent_id, fence in pairs:
        if running_at.get(parent_id) != fence:
            raise LeaseLost(parent_id, fence)


def born_cancelled(parent_state: RunState | str | None, parent_cancel_requested: bool) -> bool:
    """A child whose parent is cancelled or has a cancel requested is born `cancelled`
    (never claimed; its log: `submitted`, then `cancelled`).

    A cancel reads the family it cancels; a child submitted at that moment (its parent
    still running) would otherwise escape it, queued under a cancelled parent. So every
    backend decides a child's birth on its parent as it is when the child is inserted, in
    the insert's own transaction or script, and a cancel either sees the child (and ends
    it) or the child sees the cancel. `parent_state` None: no parent (or none found)."""
    if parent_state is None:
        return False
    return RunState(parent_state).value in CANCELS_CHILDREN or parent_cancel_requested


def born_cancelled_run(run: Run, now: float) -> Run:
    """`run`, as returned by an insert that found it `born_cancelled` (a store that builds
    the runs it returns from the insert's values): ended now, its second event logged."""
    run.state, run.finished_at, run.error, run.last_seq = RunState.CANCELLED, now, born_cancelled_error(), 2
    return run


# -- a manual retry ---------------------------------------------------------------------


RETRYABLE = tuple(sorted(state.value for state in RETRYABLE_STATES))  # for SQL and Lua


def check_retryable(run: Run) -> None:
    """A manual retry takes an ended run that can be retried (RETRYABLE_STATES) back to
    queued; any other state is RunNotRetryable. running -> queued is an allowed edge (a
    backoff, a give-back, a takeover), so the transition table alone would let a retry
    supersede a live claim and run its step a second time. Each backend checks this on
    the state it is about to write over (under the run's lock, or in its script)."""
    if run.state not in RETRYABLE_STATES:
        raise RunNotRetryable(run.id, run.state.value, run.done)
    check_transition(run.id, run.state, QUEUED)


def retried_event(run: Run, by: str | None) -> dict[str, object]:
    """The data of the `retried` event a manual retry appends: the run's log goes on past
    its end, so a follower (or an SSE reconnect after the end) sees the new attempt."""
    return {"previous": run.state.value, "by": by}


def retry_drops(run: Run, journal: Sequence[StepRecord]) -> list[int]:
    """Check that `run` may be retried, and return the journal positions to forget.

    A retry asked for by hand means "try again": journaled failures run again, while
    completed steps keep their results. An OutcomeUnknown stays: that call may have
    happened, and at-most-once means never again."""
    check_retryable(run)
    failed = [record.position for record in journal if record.status == "failed"
              and json.loads(record.error or "{}").get("type") != "OutcomeUnknown"]
    if not failed:
        return []
    # A snapshot taken after a failure that runs again folded that failure in: it goes
    # too, so the resume replays from before the failure (and snapshots again).
    later = [record.position for record in journal
             if record.name == SNAPSHOT and record.position > min(failed)]
    return sorted(failed + later)


def check_fork(original: Run | None, params: RunForkParams) -> Run:
    """The run a fork copies from, if this fork may copy it: RunNotFound unless it
    exists in the fork's tenant (another tenant's run reads as no run); a run of a thread
    is not forked (its messages and its turn are its thread's, and a fork joins none)."""
    if original is None or (original.tenant or None) != (params.insert.tenant or None):
        raise RunNotFound(f"run {params.run_id} not found")
    if original.thread is not None:
        raise InvalidInput(f"run {original.id} is a run of thread {original.thread!r}: a run of a "
                           f"thread cannot be forked (its messages are the thread's); submit anew")
    return original


def fork_end(run_id: int, journal: Sequence[tuple[int, str]], from_step: int | str) -> int:
    """The position a fork's copy stops before, from the original's journal as (position,
    name) in position order: `from_step` itself (0 .. the journal's end, the position
    after its last entry), or the position of the first entry named `from_step`. Past
    the end, or a name no entry bears, is InvalidInput."""
    if isinstance(from_step, str):
        for position, name in journal:
            if name == from_step:
                return position
        raise InvalidInput(f"from_step={from_step!r}: run {run_id} journaled no step of that name")
    end = journal[-1][0] + 1 if journal else 0
    if not 0 <= from_step <= end:
        held = (f"it holds positions 0 to {end - 1}: fork from 0 to {end}" if end
                else "it holds no step yet: fork from 0")
        raise InvalidInput(f"from_step={from_step} is past the end of run {run_id}'s journal ({held})")
    return from_step


def forked_event(original: int, end: int, copied: int) -> dict[str, object]:
    """The data of the `forked` event, a fork's second (after `submitted`)."""
    return {"from_run": original, "from_step": end, "copied": copied}


def check_retry_on_thread(run: Run, found: ThreadInfo | None, its_own: bool) -> None:
    """A retry re-opens a run on its thread, so a run of a thread may be retried only
    while that thread stands: ThreadDeleted once it is deleted (`found`, the thread
    that bears the name now, is a tombstone), once its tombstone was reclaimed (none),
    or once the name names a newer thread (`its_own` false: the store tells whether
    the run is of `found`). Such a run never joins the new thread: its turn would hold
    that thread busy and its messages would join that thread's history."""
    if run.thread is None:
        return
    if found is None or found.deleted_at is not None or not its_own:
        raise ThreadDeleted(f"run {run.id}: its thread {run.thread!r} was deleted; it cannot "
                            f"be retried")


# -- rescuing a run whose owner is gone -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rescue:
    """What a takeover does to one run (applied only while it is still running under
    the same fence: an owner that finished meanwhile wins)."""

    run_id: int
    fence: int
    state: RunState  # queued (taken over) or dead (it kept killing its workers)
    run_at: float
    finished_at: float | None
    error: str | None
    event_kind: str
    recoveries: int


def rescue_fate(run: Run, max_recoveries: int, now: float) -> Rescue:
    """Back to the queue at once, the same attempt (see "the attempt a run is
    on"); past `max_recoveries`
    takeovers, dead: a run that kills every worker stops circulating."""
    recoveries = run.recoveries + 1
    if recoveries > max_recoveries:
        return Rescue(run.id, run.fence, RunState.DEAD, run.run_at, now,
                      worker_lost_error(recoveries), "dead", recoveries)
    return Rescue(run.id, run.fence, QUEUED, now, None, run.error, "recovered", recoveries)


# -- listing runs -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BucketTake:
    """What a take from a token bucket decided: when `granted`, the level to store
    (`tokens` as of `at`); `wait_s` is how long until a refused take could be granted,
    or until a granted one's debt is paid off (0.0 when there is none)."""

    tokens: float
    at: float
    wait_s: float
    granted: bool


def take_from_bucket(params: BucketTakeParams, tokens: float | None, updated_at: float | None,
                     now: float) -> BucketTake:
    """A token bucket shared through the store: it holds up to `capacity` and refills at
    `refill_per_s` since its level was last stored (a new bucket starts full). A take of
    more than it holds is refused, except a forced take, which may leave it in debt: a
    reservation that waits its turn, or a request's real cost, known only once it was made
    (a negative amount gives back). An amount over the capacity counts as the capacity,
    or it could never be granted."""
    level = params.capacity if tokens is None else tokens
    at = now if updated_at is None else max(now, updated_at)  # a late clock never refills twice
    if updated_at is not None:
        level = min(params.capacity, level + (at - updated_at) * params.refill_per_s)
    amount = min(params.amount, params.capacity)
    if params.force or amount <= level:
        left = min(params.capacity, level - amount)
        return BucketTake(left, at, max(0.0, -left) / params.refill_per_s, True)
    return BucketTake(level, at, max((amount - level) / params.refill_per_s, 1e-6), False)


# Why Redis refuses a transactional step, submission, signal or publish, and what to do instead.
NO_TRANSACTIONS = ("a transactional step, submission, signal or publish needs a SQL store: Redis keeps "
                   "no transaction with the application's tables; use PostgreSQL or SQLite for the "
                   "store, or make the write idempotent and use ctx.step")


def list_conditions(params: RunListParams, now: float) -> list[tuple[str, str, object]]:
    """The filter of a run list as (column, operator, value); "in" takes a list, "null"
    no value. `now` is the store's clock, for what a queued run waits on."""
    conditions: list[tuple[str, str, object]] = []
    if params.states:
        conditions.append(("state", "in", [s.value for s in params.states]))
    if params.waiting is not None or params.due:
        conditions.append(("state", "in", [RunState.QUEUED.value]))
        # A stored reason holds until the run is due (a child's end, an answer, may
        # make it due sooner): a due run waits on the world instead (client `_why`).
        conditions.append(("run_at", "<=", now) if params.due else ("run_at", ">", now))
    if params.waiting is not None:
        if params.waiting in STORED_WAITS:
            conditions.append(("waiting", "=", params.waiting.value))
        elif params.waiting is WaitReason.SCHEDULED:
            conditions.append(("waiting", "null", None))
        else:
            raise InvalidInput(f"waiting={params.waiting.value} is not kept by a store; list due "
                               f"runs (due=True) and ask why (client _why)")
    for column in ("task", "queue", "thread", "key"):
        value = getattr(params, column)
        if value is not None:
            conditions.append((column, "=", value))
    if params.thread is not None:
        # A thread is one tenant's: the deployment's thread "t" (no tenant) is not tenant
        # A's thread "t", so here no tenant means "runs without a tenant".
        conditions.append(("coalesce(tenant, '')", "=", params.tenant or ""))
    elif params.tenant is not None:
        conditions.append(("tenant", "=", params.tenant))
    if params.before_id is not None:
        conditions.append(("id", "<", params.before_id))
    if params.created_after is not None:
        conditions.append(("created_at", ">=", float(params.created_after)))
    if params.created_before is not None:
        conditions.append(("created_at", "<", float(params.created_before)))
    if params.error is not None:
        conditions.append(("error", "contains", error_fragment(params.error)))
    if params.forked_from is not None:
        conditions.append(("forked_from", "=", params.forked_from))
    return conditions


def error_fragment(text: str) -> str:
    """What an error search looks for in a run's `error` column, lower-cased: the text as
    JSON writes it inside a string (a quote, a backslash, a newline or a non-ASCII letter
    is stored escaped, so the search is escaped the same way)."""
    return json.dumps(text)[1:-1].lower()


def like_contains(fragment: str) -> str:
    """A LIKE pattern (with ESCAPE '\\') matching any text that contains `fragment`:
    its own `%`, `_` and `\\` match only themselves."""
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# -- schema versions --------------------------------------------------------------------


def check_schema_known(found: int, known: int, where: str, noun: str = "schema") -> None:
    """A schema (Redis: a key layout) newer than this code is refused before anything is
    written."""
    if found > known:
        raise SchemaError(f"{where} has {noun} version {found}, newer than this runwright knows "
                          f"({known}); upgrade runwright. Nothing was written.")


def check_schema_current(found: int, known: int, where: str, noun: str = "schema") -> None:
    check_schema_known(found, known, where, noun)
    if found < known:
        raise SchemaError(f"{where} has {noun} version {found}, this runwright needs {known}: "
                          f"run `runwright migrate`")


# -- questions and their answers --------------------------------------------------------


def asked_event(params: QuestionOpenParams) -> dict[str, object]:
    """The data of the `asked` event: which question, of what kind, and its text (never
    the tool call's arguments: a log follower is not necessarily the approver)."""
    body = json.loads(params.body)
    data = {"question": params.position, "kind": params.kind, "text": body.get("text", "")}
    if "tool" in body:
        data["tool"] = body["tool"]
    return data


def answered_event(params: QuestionAnswerParams) -> dict[str, object]:
    return {"question": params.position, "by": params.by}


def plan_answer(run: Run | None, question: Question | None, params: QuestionAnswerParams) -> bool:
    """Whether to store this answer: True to write it (and wake the run), False when the
    very same answer is there already (answering is idempotent). Raises when it cannot
    be: no such run (or another tenant's), no such question, a different answer given
    before, the run ended, or a value that does not fit the question's schema."""
    if run is None or (params.tenant is not None and run.tenant != params.tenant):
        raise RunNotFound(f"run {params.run_id} not found")
    if question is None:
        raise QuestionNotFound(f"run {run.id} has no question {params.position}")
    value = json.loads(params.answer)
    if question.answered:
        if value == question.answer:
            return False
        raise AlreadyAnswered(f"run {run.id} question {question.id} was answered already "
                              f"(by {question.answered_by}), with another value")
    if run.done:
        raise RunEnded(f"run {run.id} ended {run.state.value}: its question {question.id} "
                       f"can no longer be answered")
    check_answer(question, value)
    return True


# -- signals --------------------------------------------------------------------------


def plan_signal(run: Run | None, same_key: Signal | None, pending: int, params: SignalSendParams) -> bool:
    """Whether to keep this signal: True to write it (and wake the run), False when its
    key names a signal the run keeps already, the same one (sending is idempotent by key).
    Raises when it cannot be: no such run (or another tenant's), the key taken by another
    signal (KeyConflict), the run ended (RunEnded), or `max_pending` signals waiting."""
    if run is None or (params.tenant is not None and run.tenant != params.tenant):
        raise RunNotFound(f"run {params.run_id} not found")
    if same_key is not None:
        if same_key.name == params.name and same_key.payload == json.loads(params.payload):
            return False
        raise KeyConflict(params.key or "", run.id, ["signal"],
                          f"signal key {params.key!r} of run {run.id} was sent with another name or payload")
    if run.done:
        raise RunEnded(f"run {run.id} ended {run.state.value}: it takes no more signals")
    if pending >= params.max_pending:
        raise SignalsFull(f"run {run.id} has {pending} signals not yet taken, as many as it may keep: "
                          f"send again once it has read some")
    return True


def signalled_event(params: SignalSendParams, seq: int) -> dict[str, object]:
    """The data of the `signalled` event: which signal and who sent it (never the payload:
    a log follower is not necessarily meant to read it)."""
    return {"signal": seq, "name": params.name, "by": params.by}


# -- retention ------------------------------------------------------------------------


def merge_ranges(ranges: Sequence[tuple[int, int]], reclaimed: Sequence[int]) -> list[tuple[int, int]]:
    """The reclaimed id ranges, with a pass's reclaimed ids added as one range from their
    lowest to their highest. A live run inside a range is still found first, and ids are
    never reused, so a missing id in a range was reclaimed (or never named a run): the
    ranges stay a handful, however many runs are reclaimed."""
    merged = sorted([*ranges, (min(reclaimed), max(reclaimed))] if reclaimed else ranges)
    out: list[tuple[int, int]] = []
    for lo, hi in merged:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


# The kind of the event that stands in for the part of a log that retention removed.
TRIMMED = "trimmed"


def trim_marker(last_seq: int, trimmed_seq: int, keep: int) -> tuple[int, dict[str, int]] | None:
    """Where a log of `last_seq` events, trimmed before up to `trimmed_seq` (0: never),
    is cut to keep its last `keep` events: the seq of the `trimmed` marker and its data,
    or None when the log is within the bound.

    The marker takes the seq of the newest event removed, and every seq before it goes:
    the log keeps its numbers (no seq is reused or renumbered, so a resume by seq stays
    exact), and a reader from any earlier seq meets the marker first, which names the
    first seq kept: a jump it is told about, never a silent gap."""
    marker = last_seq - keep
    if keep < 0 or marker <= trimmed_seq:
        return None
    return marker, {"first_seq": marker + 1, "removed": marker}


def runs_beyond_thread_cap(runs: Iterable[Run], keep: int) -> list[int]:
    """What a cap of `keep` runs a thread removes: of each thread's runs but its newest
    `keep` (by id; open runs count, and stay), the ended ones, oldest first. A thread is
    (tenant, name): tenant A's "t" and tenant B's "t" are capped apart."""
    by_thread: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        if run.thread is not None:
            by_thread.setdefault((run.tenant or "", run.thread), []).append(run)
    return sorted(run.id for group in by_thread.values()
                  for run in sorted(group, key=lambda r: r.id, reverse=True)[keep:] if run.done)


def check_thread_readable(name: str, found: ThreadInfo | None, incarnation: int | None,
                          missing_ok: bool) -> None:
    """Whether a reader may read the thread `found` under `name`: ThreadDeleted for a
    tombstone, and for a reader that holds an `incarnation` when the name now names
    another thread or none (the tombstone of its thread was reclaimed): it is never
    shown a new thread as the continuation of its own. Without an identity a missing
    thread is ThreadNotFound, unless `missing_ok` (an empty history)."""
    if found is None:
        if incarnation is not None:
            raise ThreadDeleted(f"thread {name!r} was deleted")
        if not missing_ok:
            raise ThreadNotFound(f"thread {name!r} does not exist")
        return
    if found.deleted_at is not None:
        raise ThreadDeleted(f"thread {name!r} was deleted")
    if incarnation is not None and found.incarnation != incarnation:
        raise ThreadDeleted(f"thread {name!r} was deleted (the name now names a new thread)")

