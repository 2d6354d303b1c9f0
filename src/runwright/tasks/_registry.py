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
from ._retry import Backoff, RetryPolicy
from ._serde import finite
from ._specs import TaskSpec, takes_context
from ._submission import OPTIONS

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
             ) -> Callable[[Callable[..., Any]], TaskSpec]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             queue: str = "default", priority: int = NORMAL, retries: int = 3,
             backoff: Backoff | None = None,
             retry_on: Sequence[type[BaseException]] | None = None,
             give_up_on: Sequence[type[BaseException]] = (),
             timeout_s: float | None = None,
             check: Callable[[dict[str, Any]], None] | None = None,
             versions: object = None) -> Any:
        """Register a task: `@registry.task` or `@registry.task(retries=5, ...)`. Its
        arguments are checked against its type hints at each submission (see
        `core._arguments`); `check(arguments)` may then refuse a submission with
        InvalidInput before it is stored (it sees the arguments as stored: JSON values).
        `versions`: the majors of submitting apps whose runs this code can run (one major,
        a collection, a range "1-2" or a list "1,2"; it must include the app's own). A
        worker claims a run only when the run's major is one of them. Defaults to the
        app's own major."""
        policy = RetryPolicy(retries, backoff or Backoff(),
                             tuple(retry_on) if retry_on is not None else None, tuple(give_up_on))
        if timeout_s is not None:
            finite(timeout_s, "timeout_s")

        def register(f: Callable[..., Any]) -> TaskSpec:
            task_name = name or f.__name__
            majors = check_majors(versions, self.major, task_name)
            return self.add_task(TaskSpec(task_name, f, queue, priority, policy, timeout_s,
                                          takes_context(f), check, majors))

        return register(fn) if fn is not None else register

    def add_task(self, spec: TaskSpec) -> TaskSpec:
        if spec.name in self.tasks:
            raise ConfigError(f"task {spec.name!r} is registered twice; give one a name=")
        _check_no_option_shadowed(spec)
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
            raise UnknownTask(f"unknown task {name!r}; registered tasks: {known}")
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
