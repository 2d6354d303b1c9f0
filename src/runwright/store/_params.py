"""One params object per store operation (River's `JobRescueManyParams` style).

Each carries an optional `now`: a test injects time even into SQL, and a store reads its
own clock when none is given. Every write after a claim carries `(run_id, fence)` and
changes nothing if the fence is no longer current; the caller turns "refused" into
`LeaseLost`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from ..core._signals import Signal
from ..core._versions import major_of
from ..runs import Run, RunState, WaitReason

__all__ = [
    "ON_BUSY",
    "BucketTakeParams",
    "EndedTimes",
    "EventAppendParams",
    "EventListParams",
    "EventTrimParams",
    "EventsTrimmed",
    "FlowKeyReclaimParams",
    "LeaseTakeParams",
    "LimitSetParams",
    "LimitUse",
    "QueuePauseParams",
    "QueueStat",
    "QuestionAnswerParams",
    "QuestionListParams",
    "QuestionOpenParams",
    "RunCancelParams",
    "RunClaimParams",
    "RunCountDueParams",
    "RunLimitedTasksParams",
    "RunCountParams",
    "RunEndedParams",
    "RunExpireParams",
    "RunExtendParams",
    "RunExtendResult",
    "RunFinishParams",
    "RunForkParams",
    "RunInsertParams",
    "RunListParams",
    "RunNextDueParams",
    "RunQueueStatsParams",
    "RunReclaimParams",
    "RunReclaimed",
    "RunPauseParams",
    "RunRescueParams",
    "RunResumeParams",
    "RunRetryParams",
    "RunUnrunnableParams",
    "UnrunnableKind",
    "ScheduleAdvanceParams",
    "ScheduleDueParams",
    "SchedulePauseParams",
    "StepRecordParams",
    "StepTransaction",
    "ThreadAppendParams",
    "ThreadDeleteParams",
    "ThreadEventListParams",
    "ThreadCursor",
    "ThreadForgetParams",
    "ThreadGetParams",
    "ThreadInfo",
    "ThreadListParams",
    "ThreadMessageTrimParams",
    "ThreadMessagesParams",
    "ThreadMessagesTrimmed",
    "ThreadRunReclaimParams",
    "ThreadTombstoneReclaimParams",
    "TombstonesReclaimed",
    "WorkerHeartbeatParams",
    "WorkerInfo",
    "WorkerRegisterParams",
    "WorkerWatchParams",
]

# "steer": enqueued, and the client signals the thread's running agent run, which may take
# the message in at its next model call (the follower then ends unrun; see agents/_steering.py).
ON_BUSY = ("reject", "enqueue", "interrupt", "rollback", "steer")
QueueStat = tuple[str, str, int, "float | None"]  # queue, state, count, oldest due run_at
EndedTimes = tuple[float, "float | None", float]  # an ended run's run_at, started_at, finished_at


# -- runs ---------------------------------------------------------------------------


@dataclass(slots=True)
class RunInsertParams:
    """One run to submit. `key` names it within its tenant: a second insert of the same
    (tenant, key) returns the first. With `thread`, `on_busy` is the thread's busy policy."""

    key: str
    task: str
    args: str
    queue: str = "default"
    priority: int = 2
    max_attempts: int = 4
    timeout_s: float | None = None
    run_at: float | None = None  # defaults to now
    parent_id: int | None = None
    budget: str | None = None  # JSON of a Budget
    deadline_at: float | None = None
    thread: str | None = None
    on_busy: str = "reject"
    tenant: str | None = None
    traceparent: str | None = None  # W3C, checked: the trace every attempt continues
    # The submitting app's version (see `versions`); None records none, and then any
    # worker that registers the task may run it.
    version: str | None = None
    now: float | None = None
    # The key was made for this submission (submission.fresh_key), not named by its
    # submitter: it can meet only a retry of this same insert, so a store may insert
    # without checking for it first and read the existing run only if the insert collides.
    key_is_fresh: bool = False
    # A child submitted by its parent's attempt: that attempt's fence. The insert is
    # fenced as the parent's other writes are: refused (LeaseLost, nothing written) unless
    # the parent is running at this fence, so a stale owner woken after a takeover, a
    # cancel or the parent's removal makes no child (see rules.check_parents_fenced).
    parent_fence: int | None = None
    # Its concurrency limits, JSON [[name, key, max], ...] (tasks._concurrency): claimed
    # only while every one of its (name, key) has fewer than max runs running.
    limits: str | None = None
    # Its singleton, throttle, debounce or batch, JSON [kind, name, key, mode, seconds]
    # (tasks._flow; store._flow_rules decides it under the key's lock at the insert).
    flow: str | None = None
    # A debounce's merge (tasks._flow.Debounce.merge) over stored texts: the arguments the
    # key's queued run takes, from its own and this insert's (None: this insert's). Called
    # by the store where it decides, under the key's lock (or re-checked where it writes).
    merge: Callable[[str, str], str] | None = None
    # A batch's count of the items in stored arguments (tasks._flow.Batch): whether the
    # key's queued run has room is decided on it, under the key's lock.
    items: Callable[[str], int] | None = None

    @property
    def major(self) -> int | None:
        return None if self.version is None else major_of(self.version)

    def remade(self, key: str, args: str) -> RunInsertParams:
        """This insert with another key and arguments, the rest shared (see
        submission.Inserts). Positional: by keyword it took 1.0 µs, not 0.33 (measured)."""
        return RunInsertParams(key, self.task, args, self.queue, self.priority, self.max_attempts,
                               self.timeout_s, self.run_at, self.parent_id, self.budget,
                               self.deadline_at, self.thread, self.on_busy, self.tenant,
                               self.traceparent, self.version, self.now, self.key_is_fresh,
                               self.parent_fence, self.limits, self.flow, self.merge, self.items)

    def as_run(self, run_id: int, now: float) -> Run:
        """The run this insert makes, as a read of it returns it: queued at `run_at`
        (default `now`, its creation time), no attempt yet, its `submitted` event logged."""
        return Run(run_id, self.key, self.task, self.queue, self.priority, RunState.QUEUED, self.args,
                   0, self.max_attempts, 0, now if self.run_at is None else self.run_at, now,
                   self.timeout_s, last_seq=1, parent_id=self.parent_id, budget=self.budget,
                   deadline_at=self.deadline_at, thread=self.thread, tenant=self.tenant,
                   traceparent=self.traceparent, version=self.version, limits=self.limits)


@dataclass(slots=True)
class RunListParams:
    """Filter for listing runs, newest first; `before_id` pages backwards. `tenant` None
    means any tenant, except with `thread`: a thread is one tenant's (None: no tenant's).

    With `thread`, the runs of the thread that bears the name now: an earlier thread of
    that name (deleted, its tombstone reclaimed) is another thread, and its runs are not
    listed (a name that no thread bears lists the runs that name it). With `incarnation`
    too, ThreadDeleted unless the thread of that name is still that incarnation (as
    `ThreadMessagesParams`)."""

    states: Sequence[RunState] = ()
    task: str | None = None
    queue: str | None = None
    thread: str | None = None
    tenant: str | None = None
    key: str | None = None  # the run of this idempotency key (of `tenant`'s keys, when given)
    created_after: float | None = None  # a time range over submission times
    created_before: float | None = None
    limit: int = 100
    before_id: int | None = None
    incarnation: int | None = None  # with `thread`: the thread a reader holds (ThreadInfo)
    # Queued runs not yet due that wait on this (a WaitReason of STORED_WAITS, or
    # SCHEDULED: none recorded), judged by the store's clock (`now`, for tests).
    waiting: WaitReason | None = None
    due: bool = False  # queued runs already due (what waits on the world, not on time)
    now: float | None = None
    # Runs whose error (its JSON text: type, message, traceback) contains this text, ASCII
    # letters in any case; a run with no error never matches.
    error: str | None = None
    forked_from: int | None = None  # the forks of this run (RunForkParams)


@dataclass(slots=True)
class RunCountParams:
    """Runs by state, of one tenant's runs when `tenant` is given."""

    tenant: str | None = None


@dataclass(slots=True)
class RunEndedParams:
    """The times of runs that ended at or after `since`, the latest ended first, at most
    `limit` of them (of one tenant's runs when `tenant` is given): the bounded sample
    behind the latency percentiles and throughput of the summary."""

    since: float
    limit: int = 2000
    tenant: str | None = None


@dataclass(slots=True)
class RunQueueStatsParams:
    """Per queue and state: a count, and the oldest due run_at among due queued runs."""

    tenant: str | None = None
    now: float | None = None


@dataclass(slots=True)
class RunClaimParams:
    """Claim up to `limit` due runs of `queues` whose task is one of `tasks`, and, with
    `majors` (task -> the majors its code can run), whose recorded major is one of its
    task's (a run that recorded no version is any worker's that has its task). None
    claims runs of any major: for tools and tests, never a worker. With `fleet` (a fleet
    root, `{namespace}:v{major}`), the queues that fleet paused are skipped in the claim
    itself (see QueuePauseParams): a worker that missed the pause never claims from them.
    None skips none: for tools and tests, never a worker in a fleet."""

    worker_id: int
    queues: Sequence[str]
    tasks: Sequence[str]
    limit: int
    lease_s: float
    now: float | None = None
    majors: Mapping[str, Sequence[int]] | None = None
    fleet: str | None = None
    # The tasks of `tasks` that declare concurrency limits: their runs are claimed on the
    # limited path, which counts each limit's running runs (rules.limits_room). A run
    # that carries limits is never claimed on the other path, whatever the worker says.
    limited: Sequence[str] = ()
    # Some of `limited` declare a fair key (tasks._fair): the limited claim then reads the
    # first due runs of each key and takes them in turns (store._fair_rules).
    fair: bool = False


@dataclass(slots=True)
class RunExtendParams:
    """Renew the leases of runs this worker still believes it owns."""

    worker_id: int
    runs: Sequence[tuple[int, int]]  # (run_id, fence)
    lease_s: float
    now: float | None = None


@dataclass(slots=True)
class RunExtendResult:
    lost: list[int] = field(default_factory=list)  # fence superseded: abandon these
    cancel_requested: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RunFinishParams:
    """A fenced end of an attempt.

    `state` is the target: succeeded/failed/dead/cancelled end the run; queued re-queues
    it at `run_at` (a retry after backoff). `release=True` with queued gives the run back
    untouched (graceful stop): the attempt does not count.
    """

    run_id: int
    fence: int
    state: RunState
    result: str | None = None
    error: str | None = None
    run_at: float | None = None
    release: bool = False
    # The event that records this end; the kind defaults to the target state
    # ("retrying" for a retry, "released" for a give-back).
    event_kind: str | None = None
    event_data: str = "{}"
    now: float | None = None
    # The run has no parent and no thread (both fixed at submission): its end sets nothing
    # else off, so a store may write it with no follow-up (see PostgreSQL's finish).
    # The run carries concurrency limits: its end frees a slot, so this process's
    # claimers are woken as by a requeue (each store wakes other processes itself).
    limited: bool = False
    alone: bool = False
    # A requeue's WaitReason (a park's, a retry's), kept as the run's `waiting`; every
    # other end clears it.
    waiting: str | None = None

    @property
    def kind(self) -> str:
        if self.event_kind is not None:
            return self.event_kind
        if self.state is RunState.QUEUED:
            return "released" if self.release else "retrying"
        return self.state  # a StrEnum is its own value (Enum.value is a slow property)


@dataclass(slots=True)
class RunCancelParams:
    """queued -> cancelled at once; running -> cancel requested (its owner stops it).
    Open descendants are cancelled the same way. `reason`: the cancelled event's and the
    error's words (a steered follower's: "delivered into run N")."""

    run_id: int
    now: float | None = None
    reason: str = "cancelled on request"


@dataclass(slots=True)
class RunRetryParams:
    """dead/failed -> queued with fresh attempts (see `rules.retry_drops`); a run of a
    thread only while that thread stands (`rules.check_retry_on_thread`). `by` names
    who asked, in the `retried` event (None: not known)."""

    run_id: int
    now: float | None = None
    by: str | None = None


@dataclass(slots=True)
class RunPauseParams:
    """queued -> paused now; running -> pause requested (it stops at its next step
    boundary, see `rules.plan_pause`). `by` names who asked, in its event."""

    run_id: int
    now: float | None = None
    by: str | None = None


@dataclass(slots=True)
class RunResumeParams:
    """paused -> due again (`rules.plan_resume`); a running run's pause request is
    withdrawn. `by` names who asked, in the `resumed` event."""

    run_id: int
    now: float | None = None
    by: str | None = None


@dataclass(slots=True)
class RunForkParams:
    """A fork of run `run_id`: the new run `insert`, whose journal is a copy of the
    original's entries at positions below `from_step` (an int: that many positions), or
    below the first entry named `from_step` (a str), made in the same write as the
    insert (`rules.fork_end` judges it on the journal as it stands then). The original
    must be of `insert.tenant` (RunNotFound otherwise, as for a run that does not exist)
    and of no thread. A key that names a run already returns that run (`existed`) and
    copies nothing."""

    run_id: int
    from_step: int | str
    insert: RunInsertParams


@dataclass(slots=True)
class RunRescueParams:
    """Take back runs whose owner is dead or whose lease expired.

    A rescued run goes back to queued without using an attempt; after `max_recoveries`
    takeovers it goes `dead` instead, so a run that kills every worker stops circulating.
    `worker_stale_s` is how old a heartbeat may be before its worker counts as dead on
    stores without a session-bound liveness mark.
    """

    max_recoveries: int = 20
    worker_stale_s: float = 10.0
    now: float | None = None


@dataclass(slots=True)
class RunExpireParams:
    """End `failed` (DeadlineExceeded) every open run whose deadline has passed."""

    now: float | None = None


@dataclass(slots=True)
class RunNextDueParams:
    """The earliest run_at among queued runs of `queues` and `tasks` (and, with `majors`,
    of the runs that a claim with those `majors` would take; with `fleet`, not of the
    queues that fleet paused, which a claim skips)."""

    queues: Sequence[str]
    tasks: Sequence[str]
    majors: Mapping[str, Sequence[int]] | None = None
    fleet: str | None = None
    # Of which runs (a worker whose tasks declare concurrency limits asks twice): "any",
    # every queued run; "unlimited", those without limits (what the claim's own path
    # takes); "limited_later", those with limits that come due after now (the store's
    # clock), for when the next comes due while the due ones are held back by their keys;
    # "rate_end", not a run's time but the next end (after now) of a start's window under
    # any rate (rw.Rate), for when due runs are held back by their rates: room may come then.
    # None reads a full key's backlog of due runs to answer.
    runs: Literal["any", "unlimited", "limited_later", "rate_end"] = "any"
    now: float | None = None


@dataclass(slots=True)
class RunLimitedTasksParams:
    """Of `tasks`, those with queued runs of `queues` that carry concurrency limits: a
    worker that declares none for such a task (a deploy removed its `rw.Limit`, or a
    submitter runs other code) claims them on the limited path, under the limits they carry."""

    queues: Sequence[str]
    tasks: Sequence[str]


@dataclass(slots=True)
class RunCountDueParams:
    """Queued runs of `queues` due before `due_before`, counted by task."""

    queues: Sequence[str]
    due_before: float


UnrunnableKind = tuple[str, str, "int | None", int]  # queue, task, major (None: unrecorded), count


@dataclass(slots=True)
class RunUnrunnableParams:
    """Queued runs due for at least `due_for_s` (judged by the store's clock) that no live
    worker can run, as `rules.unrunnable_kinds` decides from the workers table: counted,
    or closed `failed` (`rules.unrunnable_error`) by `run_fail_unrunnable_many`. A count
    with `tenant` counts only that tenant's runs (a close takes every tenant's)."""

    due_for_s: float = 0.0
    now: float | None = None
    tenant: str | None = None


# -- journal and events -------------------------------------------------------------


@dataclass(slots=True)
class StepRecordParams:
    """Journal one step at `position`, fenced: refused if the claim was superseded."""

    run_id: int
    fence: int
    position: int
    name: str
    status: str  # "started" (an at-most-once mark), then "done" or "failed"
    result: str | None = None
    error: str | None = None
    now: float | None = None


@dataclass(slots=True)
class StepTransaction:
    """A transactional step in progress (`Store.step_transaction`): `connection` is what the
    task writes its own tables through, inside the transaction; `record`, set before the
    block ends, is the journal entry committed with those writes (fenced: refused, the
    whole transaction rolls back and LeaseLost is raised). Left None, the transaction
    rolls back and nothing is written (a replay of a step already committed)."""

    connection: Any
    record: StepRecordParams | None = None


@dataclass(slots=True)
class EventAppendParams:
    """Append events (kind, JSON data) to a run's log, fenced.

    `mark` (one event only): the place in the run's code of a `ctx.emit`, which is part of
    the run's history: when the log holds an event of this run with that mark and kind,
    nothing is appended and its seq is returned. `replayed`: the caller knows the emit
    was appended before (its code is replaying journaled steps): nothing is ever
    appended; the seq is returned if the log still holds the event, else none ([])."""

    run_id: int
    fence: int
    events: Sequence[tuple[str, str]]
    now: float | None = None
    mark: str | None = None
    replayed: bool = False


@dataclass(slots=True)
class EventListParams:
    """A page of a run's log: events with seq > `after`, in order, at most `limit`."""

    run_id: int
    after: int = 0
    limit: int = 1000


# -- rate limits --------------------------------------------------------------------


@dataclass(slots=True)
class BucketTakeParams:
    """Take `amount` from the token bucket `name` (capacity and refill rate given by the
    caller, who owns the limit), atomically for every process (see `rules.take_from_bucket`)."""

    name: str
    capacity: float
    refill_per_s: float
    amount: float = 1.0
    force: bool = False
    now: float | None = None


@dataclass(slots=True)
class LimitSetParams:
    """Override the max of a concurrency limit: `target` is a limit's name (every key of
    it) or "<name>:<key>" (that key alone, which wins over its name's). `max` None removes
    the override (the max the runs carry applies again). Read by the next claim."""

    target: str
    max: int | None


@dataclass(frozen=True, slots=True)
class LimitUse:
    """One key of a concurrency limit as the store sees it now: the runs running and
    queued under it, and the max a claim applies (an override's, else the one its runs
    carry; `overridden` says which)."""

    name: str
    key: str
    max: int
    running: int
    queued: int
    overridden: bool = False
    # A rate's (store._rate_rules): its window, the cost started in the window now, and
    # the window's spends (until, cost), of which a queued run's next allowed time is
    # judged. None: a concurrency limit.
    per_s: float | None = None
    spent: float = 0.0
    spends: tuple[tuple[float, float], ...] = ()


# -- threads ------------------------------------------------------------------------


@dataclass(slots=True)
class ThreadMessagesParams:
    """A thread's history (of `tenant`'s thread of that name), before run `before_run`.
    With `incarnation` (a reader that holds the thread's identity, see `ThreadInfo`):
    ThreadDeleted unless the thread of that name is still that incarnation."""

    thread: str
    tenant: str | None = None
    before_run: int | None = None
    incarnation: int | None = None


@dataclass(slots=True)
class ThreadEventListParams:
    """A page of a thread's log (of `tenant`'s thread of that name): events with
    tseq > `after`, in tseq order, at most `limit`. With `incarnation`, as
    `ThreadMessagesParams`: ThreadDeleted unless the thread is still that incarnation."""

    thread: str
    tenant: str | None = None
    after: int = 0
    limit: int = 1000
    incarnation: int | None = None


@dataclass(slots=True)
class ThreadGetParams:
    """The current thread of that name (of `tenant`)."""

    thread: str
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class ThreadCursor:
    """Where a page of threads ended: its last thread's creation time and identity."""

    created_at: float
    tenant: str | None
    thread: str


@dataclass(slots=True)
class ThreadListParams:
    """A page of threads, newest first (by `created_at`; threads created at the same
    instant in an order of the store's own, the same on every page): those after
    `after` (the last of the previous page), at most `limit`. `tenant` None means every
    tenant's threads (the operator's view); deleted threads are left out unless
    `include_deleted`."""

    tenant: str | None = None
    limit: int = 100
    after: ThreadCursor | None = None
    include_deleted: bool = False


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A thread as it stands: its name within its tenant and its identity beyond the name.

    `incarnation` tells apart the threads that bore one name in turn: once a deleted
    thread's tombstone is reclaimed, a new thread may take the name, with a larger
    incarnation (an opaque number that only grows; 0 while the thread's first run is
    being submitted). A reader that read one incarnation and finds another is told
    ThreadDeleted, never shown the new thread as a continuation of the old.

    A listing adds what the store knows of the thread's runs cheaply: how many it keeps
    (retention may have reclaimed older ones), its newest, and how many are open (queued
    or running: the thread is busy). A read of one thread leaves them 0 and None."""

    thread: str
    tenant: str | None  # None: the thread of no tenant
    incarnation: int
    created_at: float
    deleted_at: float | None = None
    runs: int = 0
    open_runs: int = 0
    last_run_id: int | None = None
    last_run_state: RunState | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def busy(self) -> bool:
        return self.open_runs > 0

    @property
    def cursor(self) -> ThreadCursor:
        """The cursor of the page that ends with this thread."""
        return ThreadCursor(self.created_at, self.tenant, self.thread)


@dataclass(slots=True)
class ThreadAppendParams:
    """Add one message to its run's thread (the run's own thread and tenant), fenced."""

    run_id: int
    fence: int
    thread: str
    idx: int  # its index within the run: a replayed append of the same index is a no-op
    message: str  # JSON
    now: float | None = None


@dataclass(slots=True)
class ThreadForgetParams:
    """Rollback: drop what this run added to its thread (fenced)."""

    run_id: int
    fence: int


@dataclass(slots=True)
class ThreadDeleteParams:
    """Mark the thread deleted (new submissions refused); with `purge`, drop its history."""

    thread: str
    tenant: str | None = None
    purge: bool = False
    now: float | None = None


# -- schedules ----------------------------------------------------------------------


@dataclass(slots=True)
class ScheduleDueParams:
    """Schedules not paused whose next fire time has come."""

    now: float | None = None


@dataclass(slots=True)
class ScheduleAdvanceParams:
    """Move the next fire time, only if it is still `expected_next` (one worker wins)."""

    name: str
    expected_next: float
    next_fire_at: float


@dataclass(slots=True)
class SchedulePauseParams:
    """Pause or resume; a resume may set the next fire time."""

    name: str
    paused: bool
    next_fire_at: float | None = None
    now: float | None = None


# -- queues -------------------------------------------------------------------------


@dataclass(slots=True)
class QueuePauseParams:
    """Pause `queue` for the workers of `fleet` (a fleet root, `{namespace}:v{major}`: two
    majors are two fleets), or resume it. Durable: every claim of that fleet skips a paused
    queue (RunClaimParams.fleet), whatever its worker has heard."""

    fleet: str
    queue: str
    paused: bool
    now: float | None = None


# -- workers ------------------------------------------------------------------------


@dataclass(slots=True)
class WorkerRegisterParams:
    """`majors`: each task with the majors whose runs it can run (see `RunClaimParams`),
    read by every worker that judges whether a run is runnable by someone."""

    host: str
    pid: int
    queues: Sequence[str]
    tasks: Sequence[str]
    now: float | None = None
    version: str = "0.0.0"
    majors: Mapping[str, Sequence[int]] | None = None


@dataclass(slots=True)
class WorkerHeartbeatParams:
    worker_id: int
    now: float | None = None


@dataclass(slots=True)
class WorkerWatchParams:
    """What a worker's rescuer waits for between its looks: at most `timeout_s`."""

    worker_id: int
    timeout_s: float


@dataclass(slots=True)
class WorkerInfo:
    id: int
    host: str
    pid: int
    queues: list[str]
    tasks: list[str]
    started_at: float
    heartbeat_at: float
    version: str = "0.0.0"
    majors: dict[str, list[int]] | None = None  # None: registered before majors were (any)


# -- questions ------------------------------------------------------------------------


@dataclass(slots=True)
class QuestionOpenParams:
    """Ask a question at journal `position`, fenced, with an `asked` event. A second ask
    at the same position changes nothing and returns the question as it stands."""

    run_id: int
    fence: int
    position: int
    kind: str
    body: str  # JSON object: text, schema, and for an approval the tool call
    now: float | None = None


@dataclass(slots=True)
class QuestionAnswerParams:
    """Answer a question (JSON `answer`) as `by`, with an `answered` event, and wake the
    run. `tenant`, when set, is the answerer's: another tenant's run is not found."""

    run_id: int
    position: int
    answer: str
    by: str
    tenant: str | None = None
    now: float | None = None


@dataclass(slots=True)
class QuestionListParams:
    """Questions, oldest first: of one run, or (run_id None) of every open run; with
    `pending`, only those not answered yet. `tenant` limits them to its runs."""

    run_id: int | None = None
    pending: bool = True
    tenant: str | None = None
    limit: int = 100


# -- signals --------------------------------------------------------------------------


@dataclass(slots=True)
class SignalSendParams:
    """Send signal `name` (JSON `payload`) to a run, with a `signalled` event, and wake the
    run if it is parked. `key`, when given, makes the send idempotent: a signal of that
    key already kept by the run is returned instead (the same name and payload; else
    KeyConflict). `tenant`, when set, is the sender's: another tenant's run is not found.
    Refused: an ended run (RunEnded), a run with `max_pending` signals not yet taken
    (SignalsFull)."""

    run_id: int
    name: str
    payload: str
    key: str | None = None
    by: str | None = None
    tenant: str | None = None
    max_pending: int = 1000
    now: float | None = None


@dataclass(slots=True)
class SignalStartParams:
    """Signal-with-start: the run `start` names by its key, inserted if there is none,
    with `signal` kept in the same write when the run is new. When the key named a run
    already, nothing is written: the caller compares the submission and sends the signal
    on its own (`signal.run_id` is ignored here)."""

    start: RunInsertParams
    signal: SignalSendParams


@dataclass(slots=True)
class SignalTakeParams:
    """Take, fenced, the signal a run's wait at journal `position` reads: the one taken at
    that position already (a replay), else the oldest pending signal named `name`. With
    `step`, a store may journal the take itself, in the write that takes the signal: the
    step `step` done at `position`, its result `core._signals.taken_outcome` of the signal
    (then `SignalTaken.journaled` is that result; a store that does not leaves it None,
    and the wait journals it as any step).

    With `step` too, a store may let a wait linger for its signal: a take with `linger`
    that finds none registers the wait (`SignalTaken.lingering`), and a send of `name`
    then delivers into it (taken at `position` and journaled, in the send's write); any
    take without `linger` withdraws the registration. A lingering wait woken takes with
    `peek`: a read of what was delivered into it (`signal`, `journaled`), else `lingering`
    True when no signal of its name is pending either (nothing to take yet). A store that
    never answers `lingering` True is never asked to peek."""

    run_id: int
    fence: int
    position: int
    name: str
    now: float | None = None
    step: str | None = None
    linger: bool = False
    peek: bool = False


@dataclass(slots=True)
class SignalTaken:
    """What a take found: `owned` False when the fence was refused (nothing written);
    `signal` None when no signal of that name is pending; `journaled` the journal entry's
    result when the store journaled the take (`SignalTakeParams.step`); `lingering` True
    when the wait is registered for a send to deliver into (`SignalTakeParams.linger`)."""

    owned: bool
    signal: Signal | None = None
    journaled: str | None = None
    lingering: bool = False


@dataclass(slots=True)
class SignalListParams:
    """A run's signals in the order sent (seq), from `after`; only the pending ones with
    `pending`. `tenant` limits them to its runs (another tenant's run: RunNotFound)."""

    run_id: int
    pending: bool = False
    after: int = 0
    limit: int = 1000
    tenant: str | None = None


# -- retention ------------------------------------------------------------------------


@dataclass(slots=True)
class LeaseTakeParams:
    """Take the named lease for `lease_s` if it is free, lapsed or already `holder`'s
    (then it is renewed): one process at a time does what it guards, and a holder that
    dies loses it when it lapses, judged by the store's clock."""

    name: str
    holder: str
    lease_s: float
    now: float | None = None


@dataclass(slots=True)
class RunReclaimParams:
    """Remove at most `limit` runs that ended before `ended_before` (or more than
    `max_age_s` ago; oldest ids first) with their journal, log and questions; with
    `dry_run`, only say which."""

    ended_before: float | None = None
    limit: int = 1000
    dry_run: bool = False
    now: float | None = None
    # Instead of `ended_before`: runs that ended more than this many seconds ago, judged
    # inside the statement (script) by the store's clock (the database's), so that a
    # worker whose clock is off reclaims nothing early and keeps nothing late.
    max_age_s: float | None = None
    # Only these runs (those of them ended before `ended_before`): a caller removing what
    # it made (`runwright verify --fleet`) leaves everyone else's runs alone. None: any.
    run_ids: Sequence[int] | None = None


@dataclass(slots=True)
class RunReclaimed:
    """What one reclaim removed (or, dry, would remove)."""

    run_ids: list[int] = field(default_factory=list)
    steps: int = 0
    events: int = 0


@dataclass(slots=True)
class EventTrimParams:
    """Trim the logs of at most `limit` runs (oldest ids first) to their last `keep`
    events: what precedes them goes, and the newest event that goes is replaced by a
    `trimmed` marker (rules.trim_marker), so that a reader from an earlier seq is told
    where the log now begins. With `dry_run`, only say what would go."""

    keep: int
    limit: int = 1000
    dry_run: bool = False
    now: float | None = None


@dataclass(slots=True)
class EventsTrimmed:
    """What one trim removed (or, dry, would remove): the runs whose log was trimmed and
    how many of their events went (the marker counted among them: it took one's place)."""

    run_ids: list[int] = field(default_factory=list)
    events: int = 0


@dataclass(slots=True)
class ThreadRunReclaimParams:
    """Remove at most `limit` runs (oldest ids first) of threads that hold more than
    `keep` runs: of each thread's runs but its newest `keep`, the ended ones go, with
    their journal, log and questions, remembered as reclaimed (as `RunReclaimParams`).
    The thread's history stays: it is the thread's, not the run's."""

    keep: int
    limit: int = 1000
    dry_run: bool = False
    now: float | None = None


@dataclass(slots=True)
class ThreadTombstoneReclaimParams:
    """Reclaim at most `limit` tombstones of threads deleted more than `max_age_s` ago,
    judged inside the statement (script) by the store's clock (or before `now` minus it,
    when a time is injected), oldest first; with `dry_run`, only say which. A tombstone
    whose thread still has an open run (its delete did not finish) is kept. What is left
    of the thread (its history, its log's numbering) goes with it; its runs stay, as
    any ended run does, and are no part of a later thread of that name."""

    max_age_s: float
    limit: int = 1000
    dry_run: bool = False
    now: float | None = None


@dataclass(frozen=True, slots=True)
class FlowKeyReclaimParams:
    """Remove at most `limit` records of flow control keys (`flow_keys`; the `flow` hash on
    Redis) that no decision needs any more (store._flow_rules.unneeded), judged under the
    key's lock, by the store's clock (or at `now`, when a time is injected); with
    `dry_run`, only count them."""

    limit: int = 1000
    dry_run: bool = False
    now: float | None = None


@dataclass(slots=True)
class TombstonesReclaimed:
    """What one tombstone reclaim removed (or, dry, would remove): (tenant or None, name)."""

    threads: list[tuple[str | None, str]] = field(default_factory=list)


@dataclass(slots=True)
class ThreadMessageTrimParams:
    """Trim the histories of threads to their newest `keep` messages, at most `limit`
    messages a call (oldest first). The messages of a run still open (queued or running)
    are never removed (its resume reads them): such a thread may keep more for a while.
    With `dry_run`, only say what would go."""

    keep: int
    limit: int = 1000
    dry_run: bool = False


@dataclass(slots=True)
class ThreadMessagesTrimmed:
    """What one trim of histories removed (or, dry, would remove)."""

    threads: list[tuple[str | None, str]] = field(default_factory=list)
    messages: int = 0
