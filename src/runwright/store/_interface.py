"""The Store interface, split by concern: what the engine and the App may ask of a backend.

Operations read noun-verb-qualifier (`run_claim`, `run_finish_many`) and take one params
object each (see `params`). A backend applies what `rules` decided, atomically, in its
own dialect; the behaviour is specified by the conformance scenarios in
`tests/conformance`, which run on every backend.
"""

from __future__ import annotations

from typing import Any, AsyncContextManager, Iterable, Protocol, Sequence

from ..core._clock import Clock
from ..core._events import EventPublished, EventWait
from ..core._journal import Event, StepRecord, ThreadEvent
from ..core._questions import Question
from ..core._schedules import Schedule
from ..core._signals import Signal
from ..runs import Run
from ._bus import Bus
from ._event_params import (
    EventPublishParams,
    EventReclaimParams,
    EventWaitCloseParams,
    EventWaitListParams,
    EventWaitParams,
)
from ._hub import Hub
from ._params import (
    BucketTakeParams,
    EndedTimes,
    EventAppendParams,
    EventListParams,
    EventsTrimmed,
    EventTrimParams,
    FlowKeyReclaimParams,
    LeaseTakeParams,
    LimitSetParams,
    LimitUse,
    QuestionAnswerParams,
    QuestionListParams,
    QuestionOpenParams,
    QueuePauseParams,
    QueueStat,
    RunCancelParams,
    RunClaimParams,
    RunCountDueParams,
    RunCountParams,
    RunEndedParams,
    RunExpireParams,
    RunExtendParams,
    RunExtendResult,
    RunFinishParams,
    RunForkParams,
    RunInsertParams,
    RunLimitedTasksParams,
    RunListParams,
    RunNextDueParams,
    RunPauseParams,
    RunQueueStatsParams,
    RunReclaimed,
    RunReclaimParams,
    RunRescueParams,
    RunResumeParams,
    RunRetryParams,
    RunUnrunnableParams,
    ScheduleAdvanceParams,
    ScheduleDueParams,
    SchedulePauseParams,
    SignalListParams,
    SignalSendParams,
    SignalStartParams,
    SignalTaken,
    SignalTakeParams,
    StepRecordParams,
    StepTransaction,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadForgetParams,
    ThreadGetParams,
    ThreadInfo,
    ThreadListParams,
    ThreadMessagesParams,
    ThreadMessagesTrimmed,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
    TombstonesReclaimed,
    UnrunnableKind,
    WorkerHeartbeatParams,
    WorkerInfo,
    WorkerRegisterParams,
    WorkerWatchParams,
)

__all__ = [
    "BusStore",
    "EventStore",
    "JournalStore",
    "LimitStore",
    "Notifications",
    "QuestionStore",
    "QueueStore",
    "RetentionStore",
    "RunStore",
    "ScheduleStore",
    "SchemaStore",
    "SessionStore",
    "Store",
    "ThreadStore",
    "WorkerStore",
]


class SchemaStore(Protocol):
    """Connecting, and the numbered migrations."""

    url: str
    clock: Clock  # the store's clock: the database server's where machines share it
    schema_version_known: int
    # What the numbered versions are of: "schema" (tables), or Redis's "key layout".
    schema_noun: str

    async def open(self, create: bool = True) -> None:
        """Connect and check the schema: a newer one than this code knows is refused
        (SchemaError) and nothing is written. `create=False`: a store that does not exist
        yet (a SQLite file) is a SchemaError, and nothing is created; a server's database
        always exists. Defaults to True."""

    async def close(self) -> None: ...

    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied."""

    async def schema_version(self) -> int: ...

    async def require_schema(self) -> None:
        """SchemaError unless the schema is exactly the one this code knows."""


class SessionStore(Protocol):
    """This process's own sessions on the database server, which a fault can cut."""

    # Whether this process holds sessions on a server that `sessions_cut` terminates:
    # False for an embedded store (SQLite, memory), which has none.
    has_sessions: bool

    async def sessions_cut(self) -> int:
        """Terminate this process's own sessions on the server, its fleet bus's too, as a
        cut network would (the store reconnects as after any blip): how many were cut.
        Others' sessions are left alone. A store without sessions cuts none: 0."""


class Notifications(Protocol):
    """Change notifications: a hint to re-read, never the truth."""

    hub: Hub

    async def listen(self, runs: bool = True) -> None:
        """Start delivering change notifications into `hub`: due work and cancels, and with
        `runs` runs' ends and logs' growth too (what a follower or a result waiter needs;
        a worker alone does not, and need not be sent every run's). Idempotent; a call
        with `runs` after one without widens what is delivered, before it returns."""


class RunStore(Protocol):
    # The most runs a worker's claim asks for when its `claim_batch` is left at 0 (None:
    # as many as it has free slots). A backend that serves one claim at a time says so.
    claim_most: int | None

    async def run_insert_many(self, params: Iterable[RunInsertParams]) -> list[Run]:
        """Insert runs, each with its `submitted` event; an existing (tenant, key) returns
        the existing run, marked `existed`. A store may pull `params` as it writes; an
        error raised while pulling them writes none of them."""

    async def run_insert_threaded(self, params: RunInsertParams) -> Run:
        """Submit to `params.thread` of `params.tenant`, applying the busy policy
        `params.on_busy` to its open runs in the same transaction (see `rules.plan_busy`).
        A deleted thread raises ThreadDeleted; an existing key returns its run."""

    async def run_insert_in(self, connection: Any, params: Sequence[RunInsertParams]) -> list[Run]:
        """As `run_insert_many`, in the caller's open transaction on `connection` (the
        store's database, its own driver's connection): the runs exist if and only if it
        commits, and workers learn of them at its commit. A store with no such transaction
        (Redis) raises TransactionsUnsupported."""

    async def run_get(self, run_id: int) -> Run | None: ...

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]: ...

    async def run_list(self, params: RunListParams) -> list[Run]: ...

    async def run_count_by_state(self, params: RunCountParams) -> dict[str, int]: ...

    async def run_queue_stats(self, params: RunQueueStatsParams) -> list[QueueStat]: ...

    async def run_ended_times(self, params: RunEndedParams) -> list[EndedTimes]:
        """(run_at, started_at, finished_at) of runs ended since `params.since`, the latest
        ended first, at most `params.limit` (a run ended without starting has no start)."""

    async def run_claim(self, params: RunClaimParams) -> list[Run]: ...

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult: ...

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        """Apply fenced finishes; return the ids whose fence was refused."""

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        """`run_finish_many(params)` and `run_claim(claim)`, which a store may write as
        one (a worker's finishes and its next claim): the refused ids and the claimed
        runs. The claim may not see the queue as the finishes leave it (a retry they
        requeue is claimable from the next claim on). A store error may leave the claim
        made or not, the finishes written or not, as a lost reply to either would."""

    async def run_cancel(self, params: RunCancelParams) -> Run: ...

    async def run_retry(self, params: RunRetryParams) -> Run: ...

    async def run_pause(self, params: RunPauseParams) -> Run:
        """Pause a run (rules.plan_pause): held now if queued, asked to stop at its next
        step boundary if running; the run as it is after."""
        ...

    async def run_resume(self, params: RunResumeParams) -> Run:
        """Resume a paused run (rules.plan_resume); the run as it is after."""
        ...
    async def run_fork(self, params: RunForkParams) -> Run:
        """Insert `params.insert` as a fork of run `params.run_id` (`forked_from`), its
        journal a copy of the original's entries before `rules.fork_end`, with a `forked`
        event after its `submitted` one: all one write (a transaction, or a script), so no
        worker claims a fork without its copied journal. A fork is born at fence 1, as if
        claimed once, so that its first claim reads a journal (engine._executor). A key
        that names a run already returns it (`existed`) and copies nothing: two forks with
        one key make one run.
        RunNotFound/InvalidInput as `rules.check_fork` and `rules.fork_end` decide."""

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]: ...

    async def run_expire_many(self, params: RunExpireParams) -> list[Run]: ...

    async def run_next_due_at(self, params: RunNextDueParams) -> float | None: ...

    async def run_limited_tasks(self, params: RunLimitedTasksParams) -> set[str]: ...

    async def run_count_due_by_task(self, params: RunCountDueParams) -> dict[str, int]: ...

    async def run_count_unrunnable(self, params: RunUnrunnableParams) -> list[UnrunnableKind]:
        """Due runs that no live worker can run (`rules.unrunnable_kinds` over the workers
        table), by (queue, task, major), with their counts."""

    async def run_age_unrunnable(self, params: RunUnrunnableParams) -> float | None:
        """How long (s, by the store's clock) the longest-due of those runs (of every
        tenant) has been due; None when there is none. The rescuer wakes when it will have been due for
        `unrunnable_after_s`, rather than polling for it."""

    async def run_fail_unrunnable_many(self, params: RunUnrunnableParams) -> list[Run]:
        """End `failed` (`rules.unrunnable_error`) the runs that no live worker can run and
        that have been due for `params.due_for_s`, judged by the store's clock."""


class JournalStore(Protocol):
    # Whether the store keeps a SQL transaction with the application's tables (the
    # `*_in` operations and `step_transaction`): False on Redis, which refuses them.
    keeps_transactions: bool

    async def step_list(self, run_id: int) -> list[StepRecord]:
        """The run's journal, in position order."""

    async def step_list_resumable(self, run_id: int) -> list[StepRecord]:
        """What a resume needs of the journal: from its last done snapshot on (that entry
        first), or all of it when it has none. Its cost is bounded by the steps since the
        snapshot, however long the run."""

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        """Journal steps, at most one per run, in one write (one statement, transaction or
        script): the steps of many runs in flight share a round trip. Each answer says
        whether its step was written, judged alone: False when the fence was refused
        (nothing written). A position marked "started" may be completed once
        ("done"/"failed"); nothing else rewrites it."""

    def step_transaction(self) -> AsyncContextManager[StepTransaction]:
        """A transaction on the store's own database for the application's writes and a
        step's journal entry together (see StepTransaction): both commit, or neither. A
        store with no such transaction (Redis) raises TransactionsUnsupported."""

    async def step_record_in(self, connection: Any, record: StepRecordParams) -> None:
        """Journal `record` (fenced: LeaseLost if refused) in the caller's open transaction
        on `connection` (the store's database, its own driver's connection, as
        `run_insert_in` takes it): the entry commits with the caller's writes, or not at
        all. Redis raises TransactionsUnsupported."""

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        """Append to the run's log; the new seqs, or None when the fence was refused. A
        marked emit (`params.mark`) already in the log appends nothing and answers its
        first seq; a replayed one never appends ([] when its mark is unknown)."""

    async def event_list(self, params: EventListParams) -> list[Event]: ...


class ThreadStore(Protocol):
    async def thread_get(self, params: ThreadGetParams) -> ThreadInfo | None:
        """The thread of that name as it stands (a tombstone too: `deleted_at` set), or
        None when there is none (never submitted to, or its tombstone was reclaimed)."""

    async def thread_messages(self, params: ThreadMessagesParams) -> list[tuple[int, int, str]]:
        """(run_id, idx, message JSON) of the history, in order; ThreadDeleted if deleted
        (or, given `params.incarnation`, if the thread of that name is another one or none)."""

    async def thread_append(self, params: ThreadAppendParams) -> bool:
        """Fenced; False when the run's claim was superseded."""

    async def thread_forget_run(self, params: ThreadForgetParams) -> bool: ...

    async def thread_delete(self, params: ThreadDeleteParams) -> bool:
        """False if the thread does not exist."""

    async def thread_list(self, params: ThreadListParams) -> list[ThreadInfo]:
        """A page of threads, newest first (see the params): each with its creation and
        deletion times and its runs' counts and newest run, read from indexes (a page
        costs its threads, not every thread's runs)."""

    async def thread_event_list(self, params: ThreadEventListParams) -> list[ThreadEvent]:
        """A page of the thread's log: the events of all its runs, numbered per thread
        (tseq 1, 2, 3 ... without a gap, each run's events in their order, a number never
        given twice or changed), so that a follower resumes from one tseq. ThreadNotFound
        for a thread no run was submitted to; ThreadDeleted once deleted (its log is
        purged with it), and, given `params.incarnation`, when the thread of that name is
        another incarnation or none (its tombstone reclaimed)."""


class QuestionStore(Protocol):
    async def question_open(self, params: QuestionOpenParams) -> Question | None:
        """The question at (run, position), asked now unless it was already (then as it
        stands, maybe answered); None when the fence was refused (nothing written)."""

    async def question_answer(self, params: QuestionAnswerParams) -> Question:
        """Store the answer and wake the run, as decided by `rules.plan_answer`
        (RunNotFound, QuestionNotFound, RunEnded, AlreadyAnswered; the same answer
        again returns the question unchanged)."""

    async def question_list(self, params: QuestionListParams) -> list[Question]: ...


class SignalStore(Protocol):
    async def signal_send(self, params: SignalSendParams) -> Signal:
        """Keep the signal and wake the run, as decided by `rules.plan_signal` (RunNotFound,
        RunEnded, SignalsFull, KeyConflict; a key sent again returns its signal as kept).
        A run parked waiting for a signal comes due now; a running one is flagged so that
        its park, if one is on its way, comes due at once (as an answer wakes a run)."""

    async def signal_send_in(self, connection: Any, params: SignalSendParams) -> Signal:
        """As `signal_send`, in the caller's open transaction on `connection` (as
        `run_insert_in` takes it): kept, and its run woken, if and only if that commits.
        Redis raises TransactionsUnsupported."""

    async def signal_start(self, params: SignalStartParams) -> tuple[Run, Signal | None]:
        """Signal-with-start, one write: the run of `params.start`'s key, inserted with the
        signal when there was none (then `(run, signal)`); when the key named a run
        already, nothing is written and `(that run, None)` is returned (`run.existed`)."""

    async def signal_take(self, params: SignalTakeParams) -> SignalTaken:
        """The signal for the wait at (run, position): the one taken there already, else
        the oldest pending one of that name, taken now (fenced: a refused fence writes
        nothing and says `owned` False). With `params.step`, the store may journal the
        take in the same write (`SignalTaken.journaled`)."""

    async def signal_list(self, params: SignalListParams) -> list[Signal]:
        """A run's signals in the order sent (RunNotFound for no such run in the tenant)."""

    async def signal_withdraw(self, run_id: int, seq: int) -> bool:
        """Remove signal `seq` of the run if no wait has taken it yet (with a `withdrawn`
        event): True; False when it was taken (or is not there). One write: a take and a
        withdrawal of one signal never both succeed."""


class EventStore(Protocol):
    """Events awaited by key (core._events): the registry of waits a publisher finds by name."""

    async def event_wait(self, params: EventWaitParams) -> bool:
        """Register the wait at (run, position), once (a replay changes nothing); False when
        the fence was refused (nothing written)."""

    async def event_wait_close(self, params: EventWaitCloseParams) -> bool:
        """Close the wait if still waiting (no later publish delivers to it); False when the
        fence was refused."""

    async def event_wait_list(self, params: EventWaitListParams) -> list[EventWait]:
        """A run's registered waits, by position."""

    async def event_publish(self, params: EventPublishParams) -> EventPublished:
        """Keep the event by its id and deliver it, in one write, to every fitting waiting
        registration of its tenant (see EventPublishParams); an id published before
        delivers nothing and returns its first outcome (`existed`), or KeyConflict."""

    async def event_publish_in(self, connection: Any, params: EventPublishParams) -> EventPublished:
        """As `event_publish`, in the caller's open transaction on `connection` (as
        `run_insert_in` takes it): kept and delivered if and only if that commits. Redis
        raises TransactionsUnsupported."""

    async def event_reclaim(self, params: EventReclaimParams) -> int:
        """Forget the ids of events published more than `max_age_s` ago (by the store's
        clock); how many."""


class RetentionStore(Protocol):
    async def lease_take(self, params: LeaseTakeParams) -> bool:
        """True when `params.holder` holds the lease now (taken or renewed)."""

    async def run_reclaim(self, params: RunReclaimParams) -> RunReclaimed:
        """Remove ended runs (see the params); the ids removed are remembered as ranges,
        so that a later reader of one is told it expired (`run_was_reclaimed`)."""

    async def thread_run_reclaim(self, params: ThreadRunReclaimParams) -> RunReclaimed:
        """Remove the ended runs of threads beyond their newest `params.keep` runs, as
        `run_reclaim` removes old ones (remembered as reclaimed); histories stay."""

    async def event_trim(self, params: EventTrimParams) -> EventsTrimmed:
        """Trim long logs to their last `params.keep` events, behind a `trimmed` marker
        (rules.trim_marker); open runs too, atomically with their appends. A thread's
        log loses the same events (its numbers are kept: it shows the marker)."""

    async def flow_key_reclaim(self, params: FlowKeyReclaimParams) -> int:
        """Remove the records of flow control keys no decision needs any more (see the
        params, store._flow_rules.unneeded), each judged again under its key's lock: a
        submitter of the key decides on the record or on none, never on one half gone.
        How many (dry: how many would go)."""

    async def thread_tombstone_reclaim(self, params: ThreadTombstoneReclaimParams) -> TombstonesReclaimed:
        """Remove the tombstones of threads deleted long enough ago (see the params): the
        name is free for a new thread, of a larger incarnation."""

    async def thread_message_trim(self, params: ThreadMessageTrimParams) -> ThreadMessagesTrimmed:
        """Trim thread histories to their newest `params.keep` messages, sparing open runs'."""

    async def blob_references(self) -> set[str]:
        """The names of every offloaded payload's blob that anything this store keeps
        names (core._payloads.blob_names over every text it keeps, of every table or key:
        no list of payload columns to forget one). Retention's blob collection keeps these."""

    async def run_was_reclaimed(self, run_id: int) -> bool:
        """Whether a missing run id falls in a reclaimed range (an id in such a range that
        never named a run reads as reclaimed too: ids are not reused)."""


class ScheduleStore(Protocol):
    async def schedule_save(self, schedule: Schedule) -> Schedule:
        """Create, or update the definition of, a schedule (its paused state is kept; its
        next fire time is kept unless the cron or time zone changed)."""

    async def schedule_list(self) -> list[Schedule]: ...

    async def schedule_due(self, params: ScheduleDueParams) -> list[Schedule]: ...

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> bool: ...

    async def schedule_set_paused(self, params: SchedulePauseParams) -> bool:
        """False if the schedule is unknown."""

    async def schedule_delete(self, name: str) -> bool: ...


class QueueStore(Protocol):
    async def queue_set_paused(self, params: QueuePauseParams) -> bool:
        """Pause or resume a queue for one fleet; True if that changed the set. From the
        write on, no claim of that fleet takes a run of a paused queue."""

    async def queue_list_paused(self, fleet: str) -> set[str]:
        """The queues `fleet` paused."""


class WorkerStore(Protocol):
    async def worker_register(self, params: WorkerRegisterParams) -> int: ...

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        """Refresh liveness; False if the registration is gone (it was declared dead)."""

    async def worker_deregister(self, worker_id: int) -> None: ...

    async def worker_list(self) -> list[WorkerInfo]: ...

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """Wait, between a rescuer's looks, until another worker may have died (True:
        PostgreSQL wakes it the moment a worker's session ends, and again when a missing
        mark's grace ends) or `timeout_s` passed (False; a store that cannot tell only
        sleeps). Never raises for the store: the rescuer's look does."""


class LimitStore(Protocol):
    async def bucket_take(self, params: BucketTakeParams) -> float:
        """Take from a shared token bucket, atomically across every process: 0.0 when
        taken, else the seconds until the take could be granted (nothing taken). A
        forced take is always taken: it returns the seconds until the debt it leaves
        is paid off by the refill (0.0 when it leaves none)."""

    async def limit_set(self, params: LimitSetParams) -> None:
        """Override a concurrency limit's max (or remove the override), read by every
        claim from the next one on; claimers are woken (a raised max lets runs go)."""

    async def limit_list(self) -> list[LimitUse]:
        """Every key with runs running or queued under it, its use and the max a claim
        applies now."""

    async def limit_overrides(self) -> dict[str, int]:
        """The operator's overrides: target ("<name>" or "<name>:<key>") -> max."""


class BusStore(Protocol):
    def bus(self, root: str) -> Bus:
        """A new bus for the fleet root `root` (`{namespace}:v{major}`), closed until its
        `open()`: it opens connections of its own (a LISTEN session, a pub/sub connection,
        a polling SQLite connection), so the fleet never competes with runs for the
        store's pool. Its rows and messages are this store's, under `root`. A backend
        imports its bus when asked: a worker on PostgreSQL never loads redis-py."""


class Store(SchemaStore, SessionStore, Notifications, RunStore, JournalStore, ThreadStore, QuestionStore,
            SignalStore, EventStore, RetentionStore, ScheduleStore, QueueStore, WorkerStore, LimitStore,
            BusStore,
            Protocol):
    """What every backend provides."""
