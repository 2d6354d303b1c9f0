"""The registry: the tasks, tools and schedules a program declares, by name.

What a worker executes and what a submission may name. The engine is given a registry,
never the App: it looks tasks up here and nothing else.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable, Sequence, overload

from ..agents._rate_limits import RateLimit
from ..agents._tools import ToolSpec, tool_spec
from ..core._schedules import Schedule
from ..core._versions import DEFAULT_VERSION, check_majors, check_version, major_of
from ..errors import ConfigError, UnknownTask
from ..runs import NORMAL
from ._concurrency import Limit, LimitsOf
from ._events import check_starts_on
from ._fair import Fair, FairLimitsOf
from ._flow import Batch, Debounce, FlowOf, Singleton, Throttle
from ._rates import Rate, rates_declared
from ._retry import Backoff, RetryPolicy
from ._serde import finite
from ._specs import TaskSpec, takes_context
from ._submission import OPTIONS, priority_fault

__all__ = ["Registry"]


class Registry:
    """Tasks, tools and schedules by name, and the resources they hold (closed with the app).

    `version` is the app's: the version its submissions record, and whose major its
    tasks run unless they declare `versions=`. Defaults to "0.0.0"."""

    def __init__(self, version: str = DEFAULT_VERSION) -> None:
        self.version = check_version(version)
        self.major = major_of(version)
        self.tasks: dict[str, TaskSpec] = {}
        self.tools: dict[str, ToolSpec] = {}
        self.schedules: dict[str, Schedule] = {}  # declared in code; workers save them at start
        self.rate_limits: dict[str, RateLimit] = {}  # by model ("openai:gpt-4o-mini")
        self.closers: list[Callable[[], Awaitable[None]]] = []
        # The tasks runwright registers itself (the built-in jobs, verify's workload), told
        # apart from the app's own where they are counted (a worker's start line).
        self.built_in: frozenset[str] = frozenset()

    @overload
    def task(self, fn: Callable[..., Any], /) -> TaskSpec: ...

    @overload
    def task(self, fn: None = ..., /, *, name: str | None = ..., queue: str = ..., priority: int = ...,
             retries: int = ..., backoff: Backoff | None = ...,
             retry_on: Sequence[type[BaseException]] | None = ...,
             give_up_on: Sequence[type[BaseException]] = ...,
             timeout_s: float | None = ...,
             check: Callable[[dict[str, Any]], None] | None = ...,
             versions: object = ...,
             on_event: str | None = ...,
             on_exhausted: str = ...,
             concurrency: Limit | Sequence[Limit] | None = ...,
             singleton: Singleton | None = ..., throttle: Throttle | None = ...,
             debounce: Debounce | None = ..., batch: Batch | None = ...,
             rate: Rate | Sequence[Rate] | None = ..., fair: Fair | None = ...,
             ) -> Callable[[Callable[..., Any]], TaskSpec]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             queue: str = "default", priority: int = NORMAL, retries: int = 3,
             backoff: Backoff | None = None,
             retry_on: Sequence[type[BaseException]] | None = None,
             give_up_on: Sequence[type[BaseException]] = (),
             timeout_s: float | None = None,
             check: Callable[[dict[str, Any]], None] | None = None,
             versions: object = None, on_event: str | None = None, on_exhausted: str = "dead",
             concurrency: Limit | Sequence[Limit] | None = None, singleton: Singleton | None = None,
             throttle: Throttle | None = None, debounce: Debounce | None = None,
             batch: Batch | None = None, rate: Rate | Sequence[Rate] | None = None,
             fair: Fair | None = None) -> Any:
        """Register a task: `@registry.task` or `@registry.task(retries=5, ...)`. Its
        arguments are checked against its type hints at each submission (see
        `core._arguments`); `check(arguments)` may then refuse a submission with
        InvalidInput before it is stored (it sees the arguments as stored: JSON values).
        `versions`: the majors of submitting apps whose runs this code can run (one major,
        a collection, a range "1-2" or a list "1,2"; it must include the app's own). A
        worker claims a run only when the run's major is one of them. Defaults to the
        app's own major. `on_event`: an event name whose every publish (`publish_event`)
        starts a run of this task, given the event's data as its `event` argument.
        `on_exhausted="pause"`: a run whose attempts ran out is paused at the failing step
        instead of going dead, to be resumed (`app.resume`) once a fix is deployed, or
        cancelled (see RetryPolicy.on_exhausted).
        `concurrency`: a `Limit` or a list of them (per key, and a global one with a
        constant key): at most `max` runs of one key running at once, fleet-wide.
        `singleton`, `throttle`, `debounce`, `batch` (one of them): flow control per key
        at submission, decided by the store (see tasks._flow). A batched task takes one
        parameter, the list of the submissions' arguments; a submission gives one item's.
        `rate`: a `Rate` or a list of them: at most `max` runs (or their cost) started per
        `per_s` seconds of one key, fleet-wide (see tasks._rates).
        `fair`: a `Fair`: its runs are claimed in turns across its keys (a tenant's
        backlog does not hold back another tenant's run), by the operator's weights."""
        policy = RetryPolicy(retries, backoff or Backoff(),
                             tuple(retry_on) if retry_on is not None else None, tuple(give_up_on),
                             on_exhausted)
        if timeout_s is not None:
            finite(timeout_s, "timeout_s")

        def register(f: Callable[..., Any]) -> TaskSpec:
            task_name = name or f.__name__
            majors = check_majors(versions, self.major, task_name)
            flow = FlowOf.declared_of(task_name, singleton, throttle, debounce, batch)
            declared = concurrency
            if flow is not None and flow.waits:  # Singleton "wait": a limit of 1 on its key
                given = [] if concurrency is None else (
                    [concurrency] if isinstance(concurrency, Limit) else list(concurrency))
                declared, flow = [*given, flow.limit()], None
            rates = rates_declared(task_name, rate)
            limits = None if declared is None and not rates else LimitsOf(task_name, declared, rates)
            if fair is not None:  # its key rides in the limits text (tasks._fair)
                limits = FairLimitsOf(task_name, declared, fair, rates)
            spec = TaskSpec(task_name, f, queue, priority, policy, timeout_s, takes_context(f), check, majors,
                            on_event, limits, flow=flow)
            if on_event is not None:
                check_starts_on(spec)
            return self.add_task(spec)

        return register(fn) if fn is not None else register

    def add_task(self, spec: TaskSpec) -> TaskSpec:
        if spec.name in self.tasks:
            raise ConfigError(f"task {spec.name!r} is registered twice; give one a name=")
        _check_no_option_shadowed(spec)
        fault = priority_fault(spec.priority)
        if fault is not None:  # else a submission taking the task's default would be refused
            raise ConfigError(f"task {spec.name!r}: {fault}")
        if spec.majors is None:
            spec = dataclasses.replace(spec, majors=(self.major,))
        self.tasks[spec.name] = spec
        return spec

    def tool(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             delivery: str = "at_least_once",
             approval: bool | Callable[[dict[str, Any]], bool] = False) -> Any:
        """Register a tool for agents: `@registry.tool` or `@registry.tool(delivery=...)`.
        Its JSON schema comes from the type hints and the docstring (Args: section).
        `approval`: True, or a predicate over the call's arguments, makes a call wait for
        a person's answer first (see `Context.ask`); a refusal is the model's tool result."""

        def register(f: Callable[..., Any]) -> ToolSpec:
            spec = tool_spec(f, name, delivery, approval)
            if spec.name in self.tools:
                raise ConfigError(f"tool {spec.name!r} is registered twice; give one a name=")
            self.tools[spec.name] = spec
            return spec

        return register(fn) if fn is not None else register

    def declare_schedule(self, schedule: Schedule) -> Schedule:
        if schedule.name in self.schedules:
            raise ConfigError(f"schedule {schedule.name!r} is declared twice")
        self.schedules[schedule.name] = schedule
        return schedule

    def prepare_arguments(self) -> None:
        """Build every typed task's argument check now: a hint that cannot be checked is
        a ConfigError naming the task and the argument here (a server's start), not at
        the task's first submission."""
        for spec in self.tasks.values():
            if spec.arguments.typed:
                spec.arguments.prepare()

    def task_spec(self, task: TaskSpec | str) -> TaskSpec:
        """The registered task of that name (UnknownTask, naming the known ones, if none)."""
        name = task.name if isinstance(task, TaskSpec) else task
        spec = self.tasks.get(name)
        if spec is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            said = f"unknown task {name!r}; registered tasks: {known}"
            raise UnknownTask(said, fields=[("task", said)])
        return spec

    def runnable_majors(self) -> dict[str, list[int]]:
        """Each task, with the majors whose runs it can run: what a worker claims, and
        what it registers so that others can tell whether any live worker can run a run."""
        return {name: list(spec.majors or (self.major,)) for name, spec in sorted(self.tasks.items())}

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run `closer` when the app closes (e.g. a model client's connections)."""
        self.closers.append(closer)

    async def close_resources(self) -> None:
        for closer in self.closers:
            await closer()


def _check_no_option_shadowed(spec: TaskSpec) -> None:
    """A parameter named like a submission option could never be given (`submit(t,
    key=...)` is the option): refused at registration rather than lost at submission."""
    shadowed = sorted(set(spec.signature.parameters) & set(OPTIONS))
    if shadowed:
        raise ConfigError(f"task {spec.name!r}: rename {', '.join(map(repr, shadowed))}; a task's "
                          f"parameter may not be named like a submission option ({', '.join(OPTIONS)})")
