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
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence

from ..agents._steering import signal_open_run
from ..core import _inputs as inputs
from ..core._journal import Event, StepRecord, ThreadEvent
from ..core._questions import Question
from ..engine._runtime import Runtime
from ..errors import InvalidInput, InvalidTransition, KeyConflict, RunExpired, RunNotFound, ThreadDeleted
from ..runs import STORED_WAITS, Run, RunState, WaitReason
from ..store._connections import driver_connection
from ..store._fair_rules import weights_set
from ..store._params import (
    EndedTimes,
    LimitUse,
    QuestionAnswerParams,
    QuestionListParams,
    QueueStat,
    RunCancelParams,
    RunCountParams,
    RunEndedParams,
    RunForkParams,
    RunInsertParams,
    RunListParams,
    RunPauseParams,
    RunQueueStatsParams,
    RunResumeParams,
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
from ._bulk import BulkActions, each_at_once
from ._events import PublishingEvents
from ._following import EVENT_PAGE, Follower
from ._forking import check_fork_key, fork_insert, fork_step
from ._handles import RunHandle
from ._listing import checked_listing, checked_thread_listing, checked_waiting
from ._signals import TalkingToRuns
from ._threads import ThreadHandle, Threads
from ._why import SCAN_LIMIT, SCAN_PAGE, Waiting, waiting_of, why_not_ended

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


class RunScope(TalkingToRuns, BulkActions, PublishingEvents):
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
                     traceparent: str | None = None, connection: Any = None, **kwargs: Any) -> RunHandle:
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
        "rollback" (as interrupt, and what it added to the thread is discarded) or "steer"
        (enqueued, and an agent of this task running on the thread takes `input` in at its
        next model call, this run then ending unrun; see `runwright.agents._steering`).

        `traceparent` (W3C) puts the run in the submitter's trace: every attempt's spans
        continue it. Without one the run starts a trace of its own.

        `connection`: the caller's open transaction on the store's database (asyncpg or
        psycopg 3, or SQLAlchemy's AsyncConnection/AsyncSession over either, on PostgreSQL;
        sqlite3, or SQLAlchemy over aiosqlite, on SQLite): the run exists if and only if
        that transaction commits, and workers learn of it at the commit. Not with
        `thread`; Redis refuses it (TransactionsUnsupported)."""
        spec = self._runtime.registry.task_spec(task)
        submission = Submission(key=key, priority=priority, delay_s=delay_s, run_at=run_at,
                                queue=queue, budget=budget, thread=thread, on_busy=on_busy,
                                on_conflict=on_conflict, tenant=self._tenant_for(tenant),
                                traceparent=traceparent, connection=connection)
        # Opened first: opening sets the store's clock (see runwright.core._clock), which a delay
        # and a deadline count from.
        await self._ready()
        params = insert_params(spec, spec.bind(args, kwargs), submission,
                               now_s=self._runtime.clock(), limits=self._runtime.limits,
                               version=self._runtime.registry.version)
        store = self._runtime.store
        if connection is not None:
            if thread is not None:
                raise InvalidInput("connection= and thread= cannot go together: a thread's order is "
                                   "kept by the store's own transaction; submit to the thread after "
                                   "your transaction commits")
            (run,) = await store.run_insert_in(await driver_connection(connection), [params])
        elif thread is None:
            (run,) = await store.run_insert_many([params])
        else:
            run = await store.run_insert_threaded(params)
            if on_busy == "steer" and not run.existed:  # enqueued; the running agent may take it in
                await signal_open_run(store, run)
        check_key_reuse(run, params, on_conflict)
        return RunHandle(self, run)

    async def submit_many(self, task: TaskSpec | str, items: Iterable[Mapping[str, Any] | Call],
                          /, *, priority: int | None = None, delay_s: float | None = None,
                          queue: str | None = None, tenant: str | None = None,
                          traceparent: str | None = None, on_conflict: str = "reject",
                          connection: Any = None) -> list[RunHandle]:
        """Submit many runs of one task as one write (atomic). Each item is the task's keyword
        arguments, or a `Call` carrying its own key, priority, delay, run_at or
        traceparent. One bad item refuses the whole batch: nothing of it is written.

        An item whose key names an existing run gets that run (`existed`), as `submit`
        does; one whose key names a run submitted otherwise conflicts. The batch is
        written first (one write: its new runs), then each item whose key existed is
        compared with its run, and a conflict raises KeyConflict for the first such item,
        with every conflicting item's index in `items` and every item's run in `handles`
        (a conflicting item wrote nothing; the others were written). With
        `on_conflict="return"` each gets its run as it is. `connection`: inside the
        caller's open transaction, as `submit`'s."""
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
                            traceparent=item.traceparent if item.traceparent is not None else traceparent,
                            connection=connection)), item.kwargs
                    else:
                        if plain is None:
                            plain = inserts(Submission(priority=priority, delay_s=delay_s, queue=queue,
                                                       tenant=tenant, traceparent=traceparent,
                                                       connection=connection))
                        made, kwargs = plain, item
                    params = made.of(spec.bind((), dict(kwargs)))
                except InvalidInput as exc:
                    raise type(exc)(f"item {index}: {exc}") from exc
                taken.append(params)
                yield params

        store = self._runtime.store
        runs = await (store.run_insert_many(checked()) if connection is None
                      else store.run_insert_in(await driver_connection(connection), list(checked())))
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

    async def pause(self, run_id: int) -> Run:
        """Pause a run: a queued one (not started yet, or waiting on a timer, a person, a
        signal, its children or a backoff) is held now, never claimed nor woken until
        resumed; a running one stops at its next step boundary, gives its slot back and is
        held, its journal kept (it ends as it would if it finishes first). Pausing a
        paused run changes nothing; an ended run raises RunEnded. Its deadline keeps
        running; so does a durable sleep's timer, whose wake is held until the resume."""
        own = await self._own(run_id)
        try:
            return await self._runtime.store.run_pause(RunPauseParams(own, by=self.tenant_name or "operator"))
        except RunNotFound:
            raise await self._missing(own) from None

    async def resume(self, run_id: int) -> Run:
        """Resume a paused run: it is due again with a fresh round of attempts, replays its
        journal (no step it finished runs again) and goes on from where it stopped, on the
        code deployed now (a run paused on a failing step runs that step again); a run
        paused before it ever started keeps the time it was submitted for. A running run
        still asked to pause is not paused after all. RunNotPaused otherwise."""
        own = await self._own(run_id)
        try:
            params = RunResumeParams(own, by=self.tenant_name or "operator")
            return await self._runtime.store.run_resume(params)
        except RunNotFound:
            raise await self._missing(own) from None

    async def retry_many(self, run_ids: Sequence[int]) -> tuple[list[RunHandle], dict[int, str]]:
        """Re-queue several dead or failed runs: (the re-queued ones, why the others were not)."""
        found: dict[int, RunHandle] = {}
        refused: dict[int, str] = {}

        async def one(run_id: int) -> None:
            try:
                found[run_id] = await self.retry(run_id)
            except RETRY_REFUSALS as exc:
                refused[int(run_id)] = str(exc)

        unique = list(dict.fromkeys(run_ids))  # an id given twice is retried once
        await each_at_once(unique, one)  # each its own checked, fenced retry
        return [found[run_id] for run_id in unique if run_id in found], refused

    async def fork(self, run_id: int, from_step: int | str, *, args: Mapping[str, Any] | None = None,
                   key: str | None = None) -> RunHandle:
        """A new run that begins where run `run_id` was at `from_step`: its journal holds a
        copy of the original's first `from_step` entries (an int: journal positions 0 to
        from_step - 1; a str: every entry before the first step of that name), whose
        recorded results it replays, and it runs the rest on the code deployed now. The
        fork's `forked_from` names the original, whose forks `forks` lists. `args`: the
        arguments to change, merged over the original's. `key`: the fork's idempotency key
        (the same key again returns the same fork; a key naming another run is
        KeyConflict). Any state may be forked, a live run too (its journal as of the fork);
        not a run of a thread. A step past the journal's end, or a name it never journaled,
        is InvalidInput, and nothing is written."""
        step = fork_step(from_step)
        original = await self.read_run(run_id)
        registry = self._runtime.registry
        spec = registry.tasks.get(original.task)  # today's task, where this process has it
        params = fork_insert(original, spec, args, key, now_s=self._runtime.clock(),
                             limits=self._runtime.limits, version=registry.version if spec else None)
        try:
            run = await self._runtime.store.run_fork(RunForkParams(original.id, step, params))
        except RunNotFound:
            raise await self._missing(original.id) from None
        check_fork_key(run, original, params)
        return RunHandle(self, run)

    async def forks(self, run_id: int, *, limit: int = 100, before_id: int | None = None) -> list[Run]:
        """The forks of run `run_id` (see `fork`), newest first; `before_id` pages backwards."""
        run = await self.read_run(run_id)
        return await self.list_runs(forked_from=run.id, limit=limit, before_id=before_id)

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
                        key: str | None = None, incarnation: int | None = None,
                        waiting: WaitReason | str | None = None, error: str | None = None,
                        forked_from: int | None = None) -> list[Run]:
        """Runs of this scope, newest first; `before_id` pages backwards. With `thread`,
        the runs of this scope's thread that bears that name now (not those of an
        earlier thread of the name, deleted), and with `incarnation` too, of that thread
        only (ThreadDeleted once the name names another); with `key`, the run of that
        idempotency key (in the App's scope, each tenant's run of it); with `error`, the
        runs whose error's type, message or traceback contains that text (ASCII letters
        in any case); with `forked_from`, the forks of that run (`fork`). With `waiting`,
        the queued runs that wait on that (a `WaitReason`; `waiting` says why each run
        waits): what the store keeps is filtered there, and what only the world can tell
        (worker, version, thread, slot) is judged on the newest SCAN_LIMIT due runs."""
        reason = checked_waiting(waiting)
        kept = reason if reason in STORED_WAITS or reason is WaitReason.SCHEDULED else None
        # With `thread`, the store lists this scope's thread only (a thread is one tenant's).
        params = checked_listing(RunListParams(
            states=states, task=task, queue=queue, thread=thread, tenant=self.tenant_name, key=key,
            created_after=created_after, created_before=created_before, limit=limit,
            before_id=before_id, incarnation=incarnation, waiting=kept,
            due=reason is not None and kept is None, error=error,
            forked_from=None if forked_from is None else _run_id(forked_from)))  # checked first
        await self._ready()
        if not params.due:
            return await self._runtime.store.run_list(params)
        found: list[Run] = []
        for _ in range(0, SCAN_LIMIT, SCAN_PAGE):
            page = await self._runtime.store.run_list(replace(params, limit=SCAN_PAGE))
            judged = await waiting_of(self, page)
            found += [run for run in page if judged[run.id].reason is reason]
            if len(found) >= limit or len(page) < SCAN_PAGE:
                break
            params.before_id = page[-1].id
        return found[:limit]

    async def waiting(self, runs: Sequence[Run]) -> dict[int, Waiting]:
        """Why each queued run of `runs` is not running, by run id (lists show it)."""
        await self._ready()
        return await waiting_of(self, runs)

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

    async def limit_uses(self) -> list[LimitUse]:
        """The keys of concurrency limits in use (what says a run is held by its limit,
        `_why`, which tells a run only of its own keys)."""
        await self._ready()
        return await self._runtime.store.limit_list()

    async def fair_weights(self) -> dict[str, int]:
        """The weights the operator set on fair keys (store._fair_rules.weights_set)."""
        await self._ready()
        return weights_set(await self._runtime.store.limit_overrides())

    # -- scoping --------------------------------------------------------------------

    async def _own(self, run_id: Any) -> int:
        """The id of a run this scope may act on (RunNotFound otherwise). The App's scope
        sees every run, so it leaves "no such run" to the operation itself."""
        value = _run_id(run_id)
        await self._ready()
        if self.tenant_name is not None:
            await self.read_run(value)
        return value

    def _run_id(self, run_id: Any) -> int:
        return _run_id(run_id)

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
        return (f"run {run_id} not found among the runs of tenant {self.tenant_name!r} (a tenant sees "
                f"only the runs submitted as it; runs submitted with no tenant, as the CLI and an "
                f"App do unless given one, are the operator's)")

    def _handle(self, run: Run) -> RunHandle:
        return RunHandle(self, run)

    def _sees(self, run: Run) -> bool:
        return self.tenant_name is None or run.tenant == self.tenant_name

    def _tenant_for(self, given: str | None) -> str | None:
        """The tenant a submission is made for: the view's own, or the one given to the App."""
        if self.tenant_name is None:
            return given
        if given is not None and given != self.tenant_name:
            raise InvalidInput(f"this view is of tenant {self.tenant_name!r}; "
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
