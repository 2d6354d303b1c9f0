"""App: the registry of tasks, and the operations any process may do on runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
    overload,
)

from .attempts import Attempt, attempts_of
from .budget import Budget
from .clock import SYSTEM_CLOCK
from .errors import (
    ConfigError,
    InvalidInput,
    InvalidTransition,
    RunEnded,
    RunNotFound,
    StoreError,
    ThreadNotFound,
    UnknownTask,
)
from .resilience import durably
from .retry import Backoff, RetryPolicy
from .runs import NORMAL, Run, RunHandle, RunState
from .schedules import MISFIRE_POLICIES, Schedule, check_cron, next_fire_after, parse_zone
from .serde import DEFAULT_MAX_PAYLOAD_BYTES, due_at, encode, finite
from .store import Store, store_from_url
from .store.hub import done_topic, events_topic
from .store.params import (
    ON_BUSY,
    EventListParams,
    RunCancelParams,
    RunInsertParams,
    RunListParams,
    RunRetryParams,
    SchedulePauseParams,
    ThreadDeleteParams,
    ThreadMessagesParams,
)
from .tasks import TaskSpec, takes_context

if TYPE_CHECKING:
    from .agents.models import ModelClient
    from .agents.tools import ToolSpec
    from .engine.worker import Worker
    from .journal import Event

__all__ = ["App", "Call"]

# Fallback re-read while waiting for a result: covers a notification lost while the
# listener reconnected. Short while the hub says it cannot deliver notifications.
RESULT_FALLBACK_S = 2.0
RESULT_DEGRADED_S = 0.1
EVENT_PAGE = 1000


@dataclass(slots=True)
class Call:
    """One item of `submit_many` with options of its own."""

    kwargs: Mapping[str, Any] = field(default_factory=dict)
    key: str | None = None
    priority: int | None = None
    delay_s: float | None = None
    run_at: float | dt.datetime | None = None


class App:
    """Registry of tasks and the face of one store.

    `App()` uses RUNWRIGHT_URL, else `sqlite:///./runwright.db`. It connects lazily, on
    first use, and creates or upgrades the schema unless `auto_migrate=False` (then run
    `runwright migrate`). A newer schema than this code knows is refused either way.
    The built-in job types (`webhook`, `llm`, `chain`) are registered unless `builtin_jobs=False`.
    """

    def __init__(self, url: str | None = None, *, auto_migrate: bool = True,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, builtin_jobs: bool = True) -> None:
        self.store: Store = store_from_url(url)
        self.url = self.store.url
        self.auto_migrate = auto_migrate
        self.max_payload_bytes = max_payload_bytes
        self.tasks: dict[str, TaskSpec] = {}
        self.tools: dict[str, ToolSpec] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.schedules: dict[str, Schedule] = {}
        if builtin_jobs:
            from .jobs import register_builtin_jobs

            register_builtin_jobs(self)
        self._opened: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"<App {self.url} tasks={sorted(self.tasks)}>"

    # -- registry -------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[..., Any], /) -> TaskSpec: ...

    @overload
    def task(self, *, name: str | None = ..., queue: str = ..., priority: int = ...,
             retries: int = ..., backoff: Backoff | None = ...,
             retry_on: Sequence[type[BaseException]] | None = ...,
             give_up_on: Sequence[type[BaseException]] = ...,
             timeout_s: float | None = ...,
             check: Callable[[dict[str, Any]], None] | None = ...,
             ) -> Callable[[Callable[..., Any]], TaskSpec]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             queue: str = "default", priority: int = NORMAL, retries: int = 3,
             backoff: Backoff | None = None,
             retry_on: Sequence[type[BaseException]] | None = None,
             give_up_on: Sequence[type[BaseException]] = (),
             timeout_s: float | None = None,
             check: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Register a task: `@app.task` or `@app.task(retries=5, timeout_s=300, ...)`.
        `check(arguments)` may refuse a submission with InvalidInput before it is stored."""
        policy = RetryPolicy(retries, backoff or Backoff(),
                             tuple(retry_on) if retry_on is not None else None, tuple(give_up_on))
        if timeout_s is not None:
            finite(timeout_s, "timeout_s")

        def register(f: Callable[..., Any]) -> TaskSpec:
            spec = TaskSpec(name or f.__name__, f, queue, priority, policy, timeout_s,
                            takes_context(f), check)
            if spec.name in self.tasks:
                raise ConfigError(f"task {spec.name!r} is registered twice; give one a name=")
            self.tasks[spec.name] = spec
            return spec

        return register(fn) if fn is not None else register

    def tool(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             delivery: str = "at_least_once") -> Any:
        """Register a tool for agents: `@app.tool` or `@app.tool(delivery="at_most_once")`.
        Its JSON schema comes from the type hints and the docstring (Args: section)."""
        from .agents.tools import tool_spec

        def register(f: Callable[..., Any]) -> ToolSpec:
            spec = tool_spec(f, name, delivery)
            if spec.name in self.tools:
                raise ConfigError(f"tool {spec.name!r} is registered twice; give one a name=")
            self.tools[spec.name] = spec
            return spec

        return register(fn) if fn is not None else register

    def agent(self, name: str, *, model: str | ModelClient, tools: Sequence[ToolSpec | str] = (),
              instructions: str = "", max_turns: int = 10, stream: bool = False,
              prices: Mapping[str, Any] | None = None, **task_options: Any) -> TaskSpec:
        """Register an agent: a task `name(input: str)` that loops model call -> tool calls
        -> model call, each journaled, until the model answers without tool calls or a
        bound is hit. Submit it like any task; `budget=` bounds cost, time and turns."""
        from .agents.loop import define_agent

        return define_agent(self, name, model=model, tools=tools, instructions=instructions,
                            max_turns=max_turns, stream=stream, prices=prices, **task_options)

    def schedule(self, name: str, *, cron: str, task: TaskSpec | str,
                 args: Mapping[str, Any] | None = None, tz: str = "UTC", misfire: str = "skip",
                 catch_up_limit: int = 10, queue: str | None = None,
                 priority: int | None = None) -> Schedule:
        """Declare a schedule in code; every worker saves it at start and any may fire it.
        `cron` is croniter syntax (an optional seconds field comes last), in time zone `tz`.
        `misfire`: "skip" (a fire missed by more than a minute is skipped) or "catch_up"
        (missed fires are run, the latest `catch_up_limit` of them)."""
        schedule = self.schedule_spec(name, cron=cron, task=task, args=args, tz=tz, misfire=misfire,
                                      catch_up_limit=catch_up_limit, queue=queue, priority=priority)
        if name in self.schedules:
            raise ConfigError(f"schedule {name!r} is declared twice")
        self.schedules[name] = schedule
        return schedule

    def schedule_spec(self, name: str, *, cron: str, task: TaskSpec | str,
                      args: Mapping[str, Any] | None, tz: str, misfire: str, catch_up_limit: int,
                      queue: str | None, priority: int | None) -> Schedule:
        """A checked Schedule (malformed cron, unknown zone or task, bad args: InvalidInput)."""
        if not isinstance(name, str) or not name or ":" in name or len(name) > 200:
            raise InvalidInput(f"schedule name must be a non-empty string without ':', got {name!r}")
        check_cron(cron)
        parse_zone(tz)
        if misfire not in MISFIRE_POLICIES:
            raise InvalidInput(f"misfire must be one of {', '.join(MISFIRE_POLICIES)}, got {misfire!r}")
        if not isinstance(catch_up_limit, int) or catch_up_limit < 1:
            raise InvalidInput(f"catch_up_limit must be a positive int, got {catch_up_limit!r}")
        spec = self.task_spec(task)
        params = self._insert_params(spec, spec.bind((), dict(args or {})), f"schedule:{name}",
                                     priority, None, None, queue, SYSTEM_CLOCK())
        return Schedule(name, cron, tz, spec.name, params.args, params.queue, params.priority,
                        params.max_attempts, misfire, catch_up_limit)

    async def save_schedule(self, schedule: Schedule, now: float | None = None) -> Schedule:
        """Store a schedule (created or redefined at run time, or declared in code)."""
        await self.open()
        now = SYSTEM_CLOCK() if now is None else now
        schedule.next_fire_at = next_fire_after(schedule.cron, schedule.tz, now)
        schedule.created_at = schedule.updated_at = now
        return await self.store.schedule_save(schedule)

    async def sync_schedules(self, now: float | None = None) -> None:
        """Save every schedule declared in code (workers do this when they start)."""
        for schedule in self.schedules.values():
            await self.save_schedule(schedule, now)

    async def pause_schedule(self, name: str) -> None:
        await self.open()
        if not await self.store.schedule_set_paused(SchedulePauseParams(name, True)):
            raise InvalidInput(f"unknown schedule {name!r}")

    async def resume_schedule(self, name: str, now: float | None = None) -> None:
        """Resume from now on: fires missed while paused are not made up."""
        await self.open()
        found = {s.name: s for s in await self.store.schedule_list()}.get(name)
        if found is None:
            raise InvalidInput(f"unknown schedule {name!r}")
        upcoming = next_fire_after(found.cron, found.tz, SYSTEM_CLOCK() if now is None else now)
        await self.store.schedule_set_paused(SchedulePauseParams(name, False, upcoming))

    async def delete_schedule(self, name: str) -> None:
        """Delete a stored schedule. One declared in code comes back when a worker starts."""
        await self.open()
        if not await self.store.schedule_delete(name):
            raise InvalidInput(f"unknown schedule {name!r}")

    def task_spec(self, task: TaskSpec | str) -> TaskSpec:
        name = task.name if isinstance(task, TaskSpec) else task
        spec = self.tasks.get(name)
        if spec is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTask(f"unknown task {name!r}; registered tasks: {known}")
        return spec

    # -- lifecycle ------------------------------------------------------------------

    async def open(self) -> App:
        """Connect and check the schema (idempotent; every operation calls it)."""
        if self._opened is None:
            self._opened = asyncio.get_running_loop().create_future()
            try:
                await self.store.open()
                if self.auto_migrate:
                    await self.store.migrate()
                else:
                    await self.store.require_schema()
            except BaseException as exc:
                self._opened.set_exception(exc)
                self._opened.exception()  # retrieved: the caller gets it raised
                raise
            self._opened.set_result(None)
        await self._opened
        return self

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run `closer` when the app closes (e.g. a model client's connections)."""
        self._closers.append(closer)

    async def close(self) -> None:
        for closer in self._closers:
            await closer()
        if self._opened is not None:
            self._opened = None
            await self.store.close()

    async def __aenter__(self) -> App:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- submission -----------------------------------------------------------------

    async def submit(self, task: TaskSpec | str, /, *args: Any, key: str | None = None,
                     priority: int | None = None, delay_s: float | None = None,
                     run_at: float | dt.datetime | None = None, queue: str | None = None,
                     budget: Budget | None = None, thread: str | None = None,
                     on_busy: str = "reject", tenant: str | None = None,
                     **kwargs: Any) -> RunHandle:
        """Submit one run. The same `key` always names the same run: submitting it again
        returns the existing run (`handle.existed` is True), whatever its state.

        With `thread`, the run joins that conversation; runs of a thread never overlap,
        and `on_busy` says what happens when the thread has an open run: "reject"
        (ThreadBusy), "enqueue" (run after it), "interrupt" (it stops at its next step
        boundary and ends `interrupted`; this run goes next) or "rollback" (as interrupt,
        and what it added to the thread is discarded)."""
        spec = self.task_spec(task)
        params = self._insert_params(spec, spec.bind(args, kwargs), key, priority, delay_s,
                                     run_at, queue, SYSTEM_CLOCK(), budget)
        params.tenant = tenant
        await self.open()
        if thread is None:
            (run,) = await self.store.run_insert_many([params])
            return RunHandle(self, run)
        if on_busy not in ON_BUSY:
            raise InvalidInput(f"on_busy must be one of {', '.join(ON_BUSY)}, got {on_busy!r}")
        if not isinstance(thread, str) or not thread or len(thread) > 256:
            raise InvalidInput(f"thread must be a non-empty string of at most 256 characters, got {thread!r}")
        params.thread = thread
        params.on_busy = on_busy
        return RunHandle(self, await self.store.run_insert_threaded(params))

    async def thread_history(self, thread: str, tenant: str | None = None) -> list[dict[str, Any]]:
        """The thread's messages, in order (ThreadDeleted once it was deleted)."""
        await self.open()
        rows = await self.store.thread_messages(ThreadMessagesParams(thread, tenant))
        return [json.loads(message) for _, _, message in rows]

    async def delete_thread(self, thread: str, timeout_s: float | None = 60,
                            tenant: str | None = None) -> None:
        """Refuse new runs on the thread, cancel its open runs, wait for them to end, then
        delete its history. Reading it afterwards raises ThreadDeleted."""
        await self.open()
        if not await self.store.thread_delete(ThreadDeleteParams(thread, tenant)):
            raise ThreadNotFound(f"thread {thread!r} does not exist")
        open_runs = await self.store.run_list(RunListParams(
            states=[RunState.QUEUED, RunState.RUNNING], thread=thread, tenant=tenant, limit=10_000))
        for run in open_runs:
            try:
                await self.store.run_cancel(RunCancelParams(run.id))
            except RunEnded:
                pass
        async with asyncio.timeout(timeout_s):
            for run in open_runs:
                await self.wait_done(run.id)
        await self.store.thread_delete(ThreadDeleteParams(thread, tenant, purge=True))

    async def submit_many(self, task: TaskSpec | str, items: Iterable[Mapping[str, Any] | Call],
                          /, *, priority: int | None = None, delay_s: float | None = None,
                          queue: str | None = None) -> list[RunHandle]:
        """Submit many runs of one task in one round trip. Each item is the task's keyword
        arguments, or a `Call` carrying its own key, priority, delay or run_at. Every item
        is checked before anything is written: one bad item refuses the whole batch."""
        spec = self.task_spec(task)
        now = SYSTEM_CLOCK()
        params = []
        for index, item in enumerate(items):
            call = item if isinstance(item, Call) else Call(kwargs=item)
            try:
                params.append(self._insert_params(
                    spec, spec.bind((), dict(call.kwargs)), call.key,
                    call.priority if call.priority is not None else priority,
                    call.delay_s if call.delay_s is not None else delay_s,
                    call.run_at, queue, now))
            except InvalidInput as exc:
                raise type(exc)(f"item {index}: {exc}") from exc
        await self.open()
        runs = await self.store.run_insert_many(params)
        return [RunHandle(self, run) for run in runs]

    def _insert_params(self, spec: TaskSpec, kwargs: dict[str, Any], key: str | None,
                       priority: int | None, delay_s: float | None,
                       run_at: float | dt.datetime | None, queue: str | None,
                       now: float, budget: Budget | None = None) -> RunInsertParams:
        priority = spec.priority if priority is None else priority
        if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 32767:
            raise InvalidInput(f"priority must be an int in 0..32767 (0 = most urgent), got {priority!r}")
        if key is not None and (not isinstance(key, str) or not key or len(key) > 512):
            raise InvalidInput(f"key must be a non-empty string of at most 512 characters, got {key!r}")
        if spec.check is not None:
            spec.check(kwargs)
        return RunInsertParams(
            key=key or uuid.uuid4().hex,
            task=spec.name,
            args=encode(kwargs, f"arguments of task {spec.name!r}", self.max_payload_bytes),
            queue=queue or spec.queue,
            priority=priority,
            max_attempts=spec.retry.max_attempts,
            timeout_s=spec.timeout_s,
            run_at=due_at(now, delay_s, run_at),
            budget=budget.to_json() if budget is not None else None,
            deadline_at=now + budget.deadline_s if budget and budget.deadline_s else None,
            now=now,
        )

    # -- observing and changing runs ------------------------------------------------

    async def get(self, run_id: int) -> RunHandle:
        """A handle on an existing run (RunNotFound if there is none)."""
        await self.open()
        run = await self.store.run_get(_run_id(run_id))
        if run is None:
            raise RunNotFound(f"run {run_id} not found")
        return RunHandle(self, run)

    async def cancel(self, run_id: int) -> Run:
        """Cancel a run: queued -> cancelled now; running -> stopped by its worker within a
        second; an ended run raises RunEnded."""
        await self.open()
        return await self.store.run_cancel(RunCancelParams(_run_id(run_id)))

    async def retry(self, run_id: int) -> RunHandle:
        """Re-queue a dead (or failed) run with fresh attempts."""
        await self.open()
        return RunHandle(self, await self.store.run_retry(RunRetryParams(_run_id(run_id))))

    async def retry_many(self, run_ids: Sequence[int]) -> tuple[list[RunHandle], dict[int, str]]:
        """Re-queue several dead or failed runs: (the re-queued ones, why the others were not)."""
        done, refused = [], {}
        for run_id in run_ids:
            try:
                done.append(await self.retry(run_id))
            except (RunNotFound, InvalidTransition) as exc:
                refused[int(run_id)] = str(exc)
        return done, refused

    async def attempts(self, run_id: int) -> list[Attempt]:
        """The run's attempts with their outcome, error and times (from its event log)."""
        await self.open()
        events, after = [], 0
        while batch := await self.store.event_list(EventListParams(_run_id(run_id), after)):
            events += batch
            after = batch[-1].seq
        return attempts_of(events)

    async def wait_done(self, run_id: int) -> Run:
        """The run once it has ended, woken by the store's notifications."""
        await self.open()
        hub = self.store.hub
        with hub.watch(done_topic(run_id)) as changed:
            await self.store.listen()
            while True:
                changed.clear()
                try:
                    run = await self.store.run_get(run_id)
                except StoreError:
                    await asyncio.sleep(RESULT_DEGRADED_S)  # a blink: wait it out, don't fail
                    continue
                if run is None:
                    raise RunNotFound(f"run {run_id} not found")
                if run.done:
                    return run
                fallback_s = RESULT_DEGRADED_S if hub.degraded else RESULT_FALLBACK_S
                try:
                    await asyncio.wait_for(changed.wait(), fallback_s)
                except TimeoutError:
                    pass

    async def events(self, run_id: int, after: int = 0, follow: bool = True) -> AsyncIterator[Event]:
        """A run's events with seq > `after`, in order; with `follow`, wait for more until
        the run has ended and its terminal event was given. Woken by LISTEN/NOTIFY on
        PostgreSQL and the data-version poll on SQLite, with a slow re-read as a safety."""
        await self.open()
        run_id = _run_id(run_id)
        hub = self.store.hub
        with hub.watch(events_topic(run_id)) as grown:
            await self.store.listen()
            while True:
                grown.clear()
                batch = await durably(self.store.event_list, EventListParams(run_id, after))
                for item in batch:
                    yield item
                    after = item.seq
                if batch and (batch[-1].terminal or len(batch) == EVENT_PAGE):
                    if batch[-1].terminal:
                        return
                    continue
                if not follow or await self._ended_with_log_read(run_id, after):
                    return
                fallback_s = RESULT_DEGRADED_S if hub.degraded else RESULT_FALLBACK_S
                try:
                    await asyncio.wait_for(grown.wait(), fallback_s)
                except TimeoutError:
                    pass

    async def _ended_with_log_read(self, run_id: int, after: int) -> bool:
        """True when the run has ended and `after` is its last event (nothing will come)."""
        run = await durably(self.store.run_get, run_id)
        if run is None:
            raise RunNotFound(f"run {run_id} not found")
        return run.done and run.last_seq <= after

    def worker(self, **options: Any) -> Worker:
        """A Worker executing this app's tasks; see `runwright.engine.worker.WorkerConfig`."""
        from .engine.worker import Worker, WorkerConfig

        return Worker(self, WorkerConfig(**options))


def _run_id(run_id: Any) -> int:
    try:
        value = int(run_id)
    except (TypeError, ValueError):
        raise RunNotFound(f"run {run_id!r} not found: run ids are integers") from None
    if not 0 < value < 2**63:  # ids are 64-bit in every store
        raise RunNotFound(f"run {run_id!r} not found")
    return value
