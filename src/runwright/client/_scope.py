"""The operations on runs, as one scope sees them: every tenant (the App) or one.

`RunScope` is what the App and a tenant's view share: submit, get, cancel, retry,
events, attempts, results, lists and counts, threads. A scope with a tenant sees only
that tenant's runs: another tenant's run answers RunNotFound, exactly like a run that
does not exist, so ids cannot be probed; its submissions, keys and threads are its own
(the store keys them by tenant, never by a joined string). The App's own scope is the
operator's: it sees every run, and `submit(..., tenant=)` submits as a tenant, the same
as `app.tenant(name).submit(...)`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence

from ..core import _inputs as inputs
from ..core._journal import Event, StepRecord, ThreadEvent
from ..core._questions import Question
from ..engine._runtime import Runtime
from ..errors import InvalidInput, InvalidTransition, KeyConflict, RunExpired, RunNotFound, ThreadDeleted
from ..runs import Run, RunState
from ..store._params import (
    EndedTimes,
    QuestionAnswerParams,
    QuestionListParams,
    QueueStat,
    RunCancelParams,
    RunCountParams,
    RunEndedParams,
    RunInsertParams,
    RunListParams,
    RunQueueStatsParams,
    RunRetryParams,
    RunUnrunnableParams,
    ThreadCursor,
    ThreadInfo,
    ThreadListParams,
    WorkerInfo,
)
from ..tasks._budget import Budget
from ..tasks._serde import encode
from ..tasks._specs import TaskSpec
from ..tasks._submission import (
    Inserts,
    Submission,
    check_key_reuse,
    check_on_conflict,
    insert_params,
    key_conflict,
)
from ._attempts import Attempt, attempts_of
from ._following import EVENT_PAGE, Follower
from ._handles import RunHandle
from ._listing import checked_listing, checked_thread_listing
from ._threads import ThreadHandle, Threads
from ._why import why_not_ended

__all__ = ["Call", "RunScope", "TenantView"]

MAX_RUN_ID = inputs.MAX_ID  # ids are 64-bit in every store
# Why a run of a retry of many is left as it is, the others retried all the same.
RETRY_REFUSALS = (RunNotFound, InvalidTransition, ThreadDeleted)


@dataclass(slots=True)
class Call:
    """One item of `submit_many` with options of its own."""

    kwargs: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None
    priority: int | None = None
    delay_s: float | None = None
    run_at: float | str | dt.datetime | None = None
    traceparent: str | None = None


class RunScope:
    """Run operations within one tenant (`tenant`), or across all of them (None)."""

    def __init__(self, runtime: Runtime, follower: Follower, threads: Threads,
                 ready: Callable[[], Awaitable[object]], tenant: str | None) -> None:
        self._runtime = runtime
        self._follower = follower
        self._threads = threads
        self._ready = ready  # connects on first use (the App's `open`)
        self.tenant_name = tenant  # None: every tenant's runs (the App's own scope)

    # -- submission -----------------------------------------------------------------

    async def submit(self, task: TaskSpec | str, /, *args: Any, key: str | None = None,
                     priority: int | None = None, delay_s: float | None = None,
                     run_at: float | str | dt.datetime | None = None, queue: str | None = None,
                     budget: Budget | None = None, thread: str | None = None,
                     on_busy: str = "reject", on_conflict: str = "reject", tenant: str | None = None,
                     traceparent: str | None = None, **kwargs: Any) -> RunHandle:
        """Submit one run. The task's arguments go positionally or by keyword; the
        submission options (`submission.OPTIONS`) are keyword-only, and no task parameter
        is named like one (registration refuses it), so the two never collide.

        The same `key` always names the same run of a tenant: submitting it again returns
        the existing run (`handle.existed` is True), whatever its state, when it is the
        same submission: the same task, arguments, queue, priority, thread and budget
        (`submission.key_conflict` says what is compared). A key that names a run
        submitted otherwise raises KeyConflict, and nothing is written; with
        `on_conflict="return"` that run is returned as it is. `run_at` is epoch
        seconds, an aware datetime or text (ISO 8601 with a time zone, or epoch seconds);
        `delay_s` or `run_at`, not both.

        With `thread`, the run joins that conversation (the tenant's thread of that name);
        runs of a thread never overlap, and `on_busy` says what happens when the thread
        has an open run: "reject" (ThreadBusy), "enqueue" (run after it), "interrupt" (it
        stops at its next step boundary and ends `interrupted`; this run goes next) or
        "rollback" (as interrupt, and what it added to the thread is discarded).

        `traceparent` (W3C) puts the run in the submitter's trace: every attempt's spans
        continue it. Without one the run starts a trace of its own."""
        spec = self._runtime.registry.task_spec(task)
        submission = Submission(key=key, priority=priority, delay_s=delay_s, run_at=run_at,
                                queue=queue, budget=budget, thread=thread, on_busy=on_busy,
                                on_conflict=on_conflict, tenant=self._tenant_for(tenant),
                                traceparent=traceparent)
        # Opened first: opening sets the store's clock (see runwright.core._clock), which a delay
        # and a deadline count from.
        await self._ready()
        params = insert_params(spec, spec.bind(args, kwargs), submission,
                               now_s=self._runtime.clock(), limits=self._runtime.limits,
                               version=self._runtime.registry.version)
        store = self._runtime.store
        if thread is None:
            (run,) = await store.run_insert_many([params])
        else:
            run = await store.run_insert_threaded(params)
        check_key_reuse(run, params, on_conflict)
        return RunHandle(self, run)

    async def submit_many(self, task: TaskSpec | str, items: Iterable[Mapping[str, Any] | Call],
                          /, *, priority: int | None = None, delay_s: float | None = None,
                          queue: str | None = None, tenant: str | None = None,
                          traceparent: str | None = None, on_conflict: str = "reject") -> list[RunHandle]:
        """Submit many runs of one task as one write (atomic). Each item is the task's keyword
        arguments, or a `Call` carrying its own key, priority, delay, run_at or
        traceparent. One bad item refuses the whole batch: nothing of it is written.

        An item whose key names an existing run gets that run (`existed`), as `submit`
        does; one whose key names a run submitted otherwise conflicts. The batch is
        written first (one write: its new runs), then each item whose key existed is
        compared with its run, and a conflict raises KeyConflict for the first such item,
        with every conflicting item's index in `items` and every item's run in `handles`
        (a conflicting item wrote nothing; the others were written). With
        `on_conflict="return"` each gets its run as it is."""
        spec = self._runtime.registry.task_spec(task)
        check_on_conflict(on_conflict)
        await self._ready()  # first, as in submit
        now_s = self._runtime.clock()
        tenant = self._tenant_for(tenant)

        def inserts(submission: Submission) -> Inserts:
            return Inserts(spec, submission, now_s=now_s, limits=self._runtime.limits,
                           version=self._runtime.registry.version)

        taken: list[RunInsertParams] = []  # what the store pulled, to compare with what it returns

        def checked() -> Iterator[RunInsertParams]:
            # Pulled by the store as it writes: a store may send the first items while it
            # checks the next (PostgreSQL does), and one that fails writes nothing.
            plain: Inserts | None = None  # the items without options of their own: made once
            for index, item in enumerate(items):
                try:
                    if isinstance(item, Call):
                        made, kwargs = inserts(Submission(
                            key=item.key, priority=item.priority if item.priority is not None else priority,
                            delay_s=item.delay_s if item.delay_s is not None else delay_s,
                            run_at=item.run_at, queue=queue, tenant=tenant,
                            traceparent=item.traceparent if item.traceparent is not None else traceparent
                        )), item.kwargs
                    else:
                        if plain is None:
                            plain = inserts(Submission(priority=priority, delay_s=delay_s, queue=queue,
                                                       tenant=tenant, traceparent=traceparent))
                        made, kwargs = plain, item
                    params = made.of(spec.bind((), dict(kwargs)))
                except InvalidInput as exc:
                    raise type(exc)(f"item {index}: {exc}") from exc
                taken.append(params)
                yield params

        runs = await self._runtime.store.run_insert_many(checked())
        handles = [RunHandle(self, run) for run in runs]
        if on_conflict == "reject":
            conflicts = [(index, conflict) for index, (run, params) in enumerate(zip(runs, taken))
                         if (conflict := key_conflict(run, params)) is not None]
            if conflicts:
                first = conflicts[0][1]
                raise KeyConflict(first.key, first.run_id, first.differs, first.detail,
                                  items=[index for index, _ in conflicts], handles=handles)
        return handles

    # -- one run --------------------------------------------------------------------

    async def get(self, run_id: int) -> RunHandle:
        """A handle on an existing run (RunNotFound if there is none in this scope)."""
        return RunHandle(self, await self.read_run(run_id))

    async def read_run(self, run_id: int) -> Run:
        """The run's record as it is now (RunNotFound if there is none in this scope)."""
        await self._ready()
        run = await self._runtime.store.run_get(_run_id(run_id))
        if run is None:
            raise await self._missing(_run_id(run_id))
        if not self._sees(run):
            raise RunNotFound(self._not_found(run_id))
        return run

    async def read_runs(self, run_ids: Sequence[int]) -> list[Run]:
        """The records of those of `run_ids` that exist in this scope, in one read."""
        await self._ready()
        found = await self._runtime.store.run_get_many([_run_id(run_id) for run_id in run_ids])
        return [run for run in found if self._sees(run)]

    async def cancel(self, run_id: int) -> Run:
        """Cancel a run: queued -> cancelled now; running -> stopped by its worker within a
        second; an ended run raises RunEnded."""
        own = await self._own(run_id)
        try:
            return await self._runtime.store.run_cancel(RunCancelParams(own))
        except RunNotFound:
            raise await self._missing(own) from None

    async def retry(self, run_id: int) -> RunHandle:
        """Re-queue a dead (or failed) run with fresh attempts; any other state is
        RunNotRetryable and nothing changes (a live run keeps its claim). Its log gets a
        `retried` event, so its followers see the new attempt. A run of a thread only
        while that thread stands: ThreadDeleted once it was deleted, even after its name
        was given to a new thread (the run is not that thread's)."""
        own = await self._own(run_id)
        try:
            run = await self._runtime.store.run_retry(RunRetryParams(own, by=self.tenant_name or "operator"))
        except RunNotFound:
            raise await self._missing(own) from None
        return RunHandle(self, run)

    async def retry_many(self, run_ids: Sequence[int]) -> tuple[list[RunHandle], dict[int, str]]:
        """Re-queue several dead or failed runs: (the re-queued ones, why the others were not)."""
        done, refused = [], {}
        for run_id in run_ids:
            try:
                done.append(await self.retry(run_id))
            except RETRY_REFUSALS as exc:
                refused[int(run_id)] = str(exc)
        return done, refused

    async def attempts(self, run_id: int) -> list[Attempt]:
        """The run's attempts with their outcome, error and times (from its event log)."""
        own = await self._own(run_id)
        return attempts_of([item async for item in self._follower.backlog(own)])

    async def steps(self, run_id: int) -> list[StepRecord]:
        """The run's journal: each step, sleep, child submission and snapshot it recorded,
        in position order (a child's entry holds the child's run id)."""
        run = await self.read_run(run_id)  # a journal of no run is RunNotFound, not empty
        return await self._runtime.store.step_list(run.id)

    async def events(self, run_id: int, after: int = 0, follow: bool = True) -> AsyncIterator[Event]:
        """A run's events with seq > `after`, in order; with `follow`, wait for more until
        the run has ended and its last event was given. Woken by LISTEN/NOTIFY on
        PostgreSQL and the data-version poll on SQLite, with a slow re-read as a safety."""
        own = await self._own(run_id)
        inputs.sequence(after)
        async for item in self._follower.events(own, after, follow):
            yield item

    async def events_page(self, run_id: int, after: int = 0, limit: int = EVENT_PAGE) -> list[Event]:
        """One page of the run's log: at most `limit` events with seq > `after`."""
        inputs.sequence(after)
        inputs.integer(limit, "limit", 1, inputs.MAX_LIMIT)
        run = await self.read_run(run_id)  # a page of no run is a 404, not an empty page
        return await self._follower.page(run.id, after, limit)

    async def wait_done(self, run_id: int) -> Run:
        """The run once it has ended, woken by the store's notifications."""
        return await self._follower.wait_done(await self._own(run_id))

    async def why_not_ended(self, run_id: int) -> str:
        """What the run waits for, in one clause (`RunWaitTimeout` says it)."""
        return await why_not_ended(self, await self.read_run(run_id))

    # -- many runs ------------------------------------------------------------------

    async def list_runs(self, *, states: Sequence[RunState] = (), task: str | None = None,
                        queue: str | None = None, thread: str | None = None,
                        created_after: float | None = None, created_before: float | None = None,
                        limit: int = 100, before_id: int | None = None,
                        key: str | None = None, incarnation: int | None = None) -> list[Run]:
        """Runs of this scope, newest first; `before_id` pages backwards. With `thread`,
        the runs of this scope's thread that bears that name now (not those of an
        earlier thread of the name, deleted), and with `incarnation` too, of that thread
        only (ThreadDeleted once the name names another); with `key`, the run of that
        idempotency key (in the App's scope, each tenant's run of it)."""
        # With `thread`, the store lists this scope's thread only (a thread is one tenant's).
        params = checked_listing(RunListParams(
            states=states, task=task, queue=queue, thread=thread, tenant=self.tenant_name, key=key,
            created_after=created_after, created_before=created_before, limit=limit,
            before_id=before_id, incarnation=incarnation))  # refused before the store is touched
        await self._ready()
        return await self._runtime.store.run_list(params)

    async def dead_letters(self, *, task: str | None = None, limit: int = 100,
                           before_id: int | None = None) -> list[Run]:
        """The dead-letter queue: runs whose attempts ran out (re-queue them with `retry`)."""
        return await self.list_runs(states=[RunState.DEAD], task=task, limit=limit, before_id=before_id)

    def now(self) -> float:
        """The time by this scope's clock (the store's, unless the App was given one)."""
        return self._runtime.clock()

    async def count_by_state(self) -> dict[str, int]:
        await self._ready()
        return await self._runtime.store.run_count_by_state(RunCountParams(self.tenant_name))

    async def queue_stats(self, now: float | None = None) -> list[QueueStat]:
        """Per queue and state: a count, and the oldest due run_at among due queued runs."""
        await self._ready()
        return await self._runtime.store.run_queue_stats(RunQueueStatsParams(
            self.tenant_name, self._runtime.clock.now(now)))

    async def ended_times(self, since: float, limit: int) -> list[EndedTimes]:
        """(run_at, started_at, finished_at) of the latest `limit` runs ended since `since`."""
        await self._ready()
        return await self._runtime.store.run_ended_times(RunEndedParams(since, limit, self.tenant_name))

    # -- threads --------------------------------------------------------------------

    async def list_threads(self, *, limit: int = 100, after: ThreadCursor | None = None,
                           include_deleted: bool = False) -> list[ThreadInfo]:
        """Threads of this scope (a tenant's own; in the App's scope every tenant's, each
        with its `tenant`), newest first; pass the last one's `.cursor` as `after` for the
        next page. Each says how many runs it keeps, how many are open (`busy`), and its
        newest run. Deleted threads are left out unless `include_deleted` (then `deleted`)."""
        params = checked_thread_listing(ThreadListParams(
            tenant=self.tenant_name, limit=limit, after=after, include_deleted=include_deleted))
        await self._ready()
        return await self._runtime.store.thread_list(params)

    def thread(self, thread: str, incarnation: int | None = None) -> ThreadHandle:
        """A handle on this scope's thread of that name that reads one thread: after its
        first read (or given `incarnation`), ThreadDeleted once that thread is deleted,
        even when a new thread takes the name (see `runwright.client._threads`)."""
        _check_thread(thread, incarnation)
        return ThreadHandle(self, thread, incarnation)

    async def thread_info(self, thread: str, incarnation: int | None = None) -> ThreadInfo:
        """This scope's thread of that name, with its incarnation: ThreadNotFound before
        its first run, ThreadDeleted once deleted (or when it is not `incarnation`)."""
        _check_thread(thread, incarnation)
        await self._ready()
        return await self._threads.info(thread, self.tenant_name, incarnation)

    async def thread_history(self, thread: str, incarnation: int | None = None) -> list[dict[str, Any]]:
        """The messages of this scope's thread, in order (ThreadDeleted once deleted, or,
        given `incarnation`, once the name names another thread)."""
        _check_thread(thread, incarnation)
        await self._ready()
        return await self._threads.history(thread, self.tenant_name, incarnation)

    async def cancel_thread(self, thread: str) -> list[Run]:
        """Cancel every open run of this scope's thread (queued ones end now, a running one
        stops within a second); the thread and its history stay, and new runs may join it."""
        inputs.thread_name(thread)
        await self._ready()
        return await self._threads.cancel(thread, self.tenant_name)

    async def follow_thread(self, thread: str, after: int = 0, follow: bool = True,
                            incarnation: int | None = None) -> AsyncIterator[ThreadEvent]:
        """Every event of every run of this scope's thread, in order, as one log numbered
        per thread (`event.tseq` 1, 2, 3 ... without a gap; each run's events in their own
        order). Resume with `after=<the last tseq seen>`. With `follow`, it waits for
        more for as long as it is read (a thread can always get another run).
        ThreadNotFound before the thread's first run; ThreadDeleted once deleted. It
        follows one thread: `incarnation`, else the one that bears the name as it begins
        (a new thread that takes the name is not followed on)."""
        _check_thread(thread, incarnation)
        inputs.sequence(after)
        await self._ready()
        async for item in self._follower.thread_events(thread, self.tenant_name, after, follow, incarnation):
            yield item

    async def thread_events_page(self, thread: str, after: int = 0, limit: int = EVENT_PAGE,
                                 incarnation: int | None = None) -> list[ThreadEvent]:
        """One page of the thread's log: at most `limit` events with tseq > `after`
        (ThreadDeleted, given `incarnation`, once the name names another thread)."""
        _check_thread(thread, incarnation)
        inputs.sequence(after)
        inputs.integer(limit, "limit", 1, inputs.MAX_LIMIT)
        await self._ready()
        return await self._follower.thread_page(thread, self.tenant_name, after, limit, incarnation)

    async def delete_thread(self, thread: str, timeout_s: float | None = 60) -> None:
        """Refuse new runs on the thread, cancel its open runs, wait for them to end, then
        delete its history. Reading it afterwards raises ThreadDeleted."""
        inputs.thread_name(thread)
        if timeout_s is not None:
            inputs.seconds(timeout_s, "timeout_s")
        await self._ready()
        await self._threads.delete(thread, self.tenant_name, timeout_s)

    # -- questions runs ask ---------------------------------------------------------

    async def questions(self, run_id: int | None = None, *, pending: bool = True,
                        limit: int = 100) -> list[Question]:
        """Questions runs of this scope asked (`ctx.ask`, tool approvals), oldest first:
        of one run, or of every open run; with `pending`, only the unanswered ones."""
        if not isinstance(limit, int) or not 0 < limit <= 1000:
            raise InvalidInput(f"limit must be an integer from 1 to 1000, got {limit!r}")
        own = None if run_id is None else await self._own(run_id)
        if own is not None and self.tenant_name is None:
            await self.read_run(own)  # a list of no run is RunNotFound, not empty
        await self._ready()
        return await self._runtime.store.question_list(QuestionListParams(
            own, pending, self.tenant_name, limit))

    async def answer(self, run_id: int, question_id: int, value: Any, *,
                     by: str | None = None) -> Question:
        """Answer a run's question and wake the run. `value` must fit the question's
        schema (InvalidInput says where it does not); for a tool's approval it is
        `{"approved": true}` or `{"approved": false, "reason": "..."}`. `by` names who
        answered (it reaches the run, and a refusal's tool result). The same answer
        again is accepted; another one raises AlreadyAnswered, an ended run RunEnded."""
        if not isinstance(question_id, int) or isinstance(question_id, bool) or question_id < 0:
            raise InvalidInput(f"a question id is an integer >= 0, got {question_id!r}")
        who = inputs.answerer(by if by is not None else (self.tenant_name or "operator"))
        answer = encode(value, "the answer", self._runtime.limits.max_payload_bytes)
        await self._ready()
        try:
            return await self._runtime.store.question_answer(QuestionAnswerParams(
                _run_id(run_id), question_id, answer, who, self.tenant_name))
        except RunNotFound:
            raise await self._missing(_run_id(run_id)) from None

    # -- the deployment, read-only --------------------------------------------------

    async def count_unrunnable(self) -> int:
        """Due runs (of this scope's tenant) that no live worker can run: no worker
        registers the task for the run's major, or serves its queue."""
        await self._ready()
        return sum(kind[3] for kind in await self.unrunnable_kinds())

    async def unrunnable_kinds(self) -> list[tuple[str, str, int | None, int]]:
        """Due runs (of this scope's tenant) that no live worker can run, by (queue, task,
        major), with their counts."""
        await self._ready()
        return await self._runtime.store.run_count_unrunnable(RunUnrunnableParams(tenant=self.tenant_name))

    async def list_workers(self) -> list[WorkerInfo]:
        """The registered workers: shared by every tenant, so any scope may count them."""
        await self._ready()
        return await self._runtime.store.worker_list()

    # -- scoping --------------------------------------------------------------------

    async def _own(self, run_id: Any) -> int:
        """The id of a run this scope may act on (RunNotFound otherwise). The App's scope
        sees every run, so it leaves "no such run" to the operation itself."""
        value = _run_id(run_id)
        await self._ready()
        if self.tenant_name is not None:
            await self.read_run(value)
        return value

    async def _missing(self, run_id: int) -> RunNotFound:
        """Why a run id names no run here: RunExpired when retention reclaimed it (the id
        says nothing of whose it was), else RunNotFound."""
        if await self._runtime.store.run_was_reclaimed(run_id):
            return RunExpired(f"run {run_id} expired: it ended and retention reclaimed it")
        return RunNotFound(self._not_found(run_id))

    def _not_found(self, run_id: int) -> str:
        """Why a run is not found, the same words whether or not it exists elsewhere."""
        if self.tenant_name is None:
            return f"run {run_id} not found"
        return (f"run {run_id} not found among tenant {self.tenant_name!r}'s runs (a tenant sees "
                f"only the runs submitted as it; runs submitted with no tenant, as the CLI and an "
                f"App do unless given one, are the operator's)")

    def _sees(self, run: Run) -> bool:
        return self.tenant_name is None or run.tenant == self.tenant_name

    def _tenant_for(self, given: str | None) -> str | None:
        """The tenant a submission is made for: the view's own, or the one given to the App."""
        if self.tenant_name is None:
            return given
        if given is not None and given != self.tenant_name:
            raise InvalidInput(f"this view is tenant {self.tenant_name!r}'s; "
                               f"it cannot submit as {given!r}")
        return self.tenant_name


class TenantView(RunScope):
    """One tenant's App: the same run operations, seeing and making only that tenant's
    runs, keys and threads. Made by `app.tenant(name)`."""

    def __repr__(self) -> str:
        return f"<TenantView {self.tenant_name!r}>"


def _check_thread(thread: Any, incarnation: Any) -> None:
    """Refuse a name no thread may have, or an incarnation no thread has (InvalidInput)."""
    inputs.thread_name(thread)
    if incarnation is not None:
        inputs.integer(incarnation, "incarnation", 1, inputs.MAX_ID)


def _run_id(run_id: Any) -> int:
    try:
        value = int(run_id)
    except (TypeError, ValueError):
        raise RunNotFound(f"run {run_id!r} not found: run ids are integers") from None
    if not 0 < value <= MAX_RUN_ID:
        raise RunNotFound(f"run {run_id!r} not found")
    return value
