"""The Store interface, split by concern: what the engine and the App may ask of a backend.

Operations read noun-verb-qualifier (`run_claim`, `run_finish_many`) and take one params
object each (see `params`). A backend applies what `rules` decided, atomically, in its
own dialect; the behaviour is specified by the conformance scenarios in
`tests/conformance`, which run on every backend.
"""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence

from ..core._clock import Clock
from ..core._journal import Event, StepRecord, ThreadEvent
from ..core._questions import Question
from ..core._schedules import Schedule
from ..runs import Run
from ._bus import Bus
from ._hub import Hub
from ._params import (
    BucketTakeParams,
    EndedTimes,
    EventAppendParams,
    EventListParams,
    EventsTrimmed,
    EventTrimParams,
    LeaseTakeParams,
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
    RunInsertParams,
    RunListParams,
    RunNextDueParams,
    RunQueueStatsParams,
    RunReclaimed,
    RunReclaimParams,
    RunRescueParams,
    RunRetryParams,
    RunUnrunnableParams,
    ScheduleAdvanceParams,
    ScheduleDueParams,
    SchedulePauseParams,
    StepRecordParams,
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

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]: ...

    async def run_expire_many(self, params: RunExpireParams) -> list[Run]: ...

    async def run_next_due_at(self, params: RunNextDueParams) -> float | None: ...

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

    async def thread_tombstone_reclaim(self, params: ThreadTombstoneReclaimParams) -> TombstonesReclaimed:
        """Remove the tombstones of threads deleted long enough ago (see the params): the
        name is free for a new thread, of a larger incarnation."""

    async def thread_message_trim(self, params: ThreadMessageTrimParams) -> ThreadMessagesTrimmed:
        """Trim thread histories to their newest `params.keep` messages, sparing open runs'."""

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


class BusStore(Protocol):
    def bus(self, root: str) -> Bus:
        """A new bus for the fleet root `root` (`{namespace}:v{major}`), closed until its
        `open()`: it opens connections of its own (a LISTEN session, a pub/sub connection,
        a polling SQLite connection), so the fleet never competes with runs for the
        store's pool. Its rows and messages are this store's, under `root`. A backend
        imports its bus when asked: a worker on PostgreSQL never loads redis-py."""


class Store(SchemaStore, SessionStore, Notifications, RunStore, JournalStore, ThreadStore, QuestionStore,
            RetentionStore, ScheduleStore, QueueStore, WorkerStore, LimitStore, BusStore, Protocol):
    """What every backend provides."""
