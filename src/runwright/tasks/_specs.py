"""Task registration: what `@app.task` records about a function."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core._arguments import TypedArguments
from ..core._payloads import load
from ..errors import BadArguments, ConfigError, FinalError
from ._blocking import in_thread
from ._concurrency import LimitsOf
from ._flow import FlowOf, batch_parameter
from ._retry import RetryPolicy
from ._serde import bind_arguments, task_signature

__all__ = ["TaskSpec", "takes_context"]

# The signature a batched task's submissions bind to: one item's keyword arguments.
_ITEM = inspect.Signature([inspect.Parameter("item", inspect.Parameter.VAR_KEYWORD)])


def takes_context(fn: Callable[..., Any]) -> bool:
    """A task receives a Context when its first parameter is named `ctx` or annotated Context."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    first = params[0]
    annotation = first.annotation if isinstance(first.annotation, str) else getattr(
        first.annotation, "__name__", "")
    return first.name == "ctx" or annotation.endswith("Context")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A registered task. Calling it calls the function directly (no run is created)."""

    name: str
    fn: Callable[..., Any]
    queue: str
    priority: int
    retry: RetryPolicy
    timeout_s: float | None
    wants_context: bool
    check: Callable[[dict[str, Any]], None] | None = None  # refuses bad arguments at submission
    # The majors of submitting apps whose runs this code can run (`versions=`, checked by
    # the registry, which sets its own major when none was given).
    majors: tuple[int, ...] | None = None
    # The event whose every publish starts a run of this task (`on_event=`), given the
    # event's data as its `event` argument (client._events).
    on_event: str | None = None
    # Its concurrency limits per key (`concurrency=`, tasks._concurrency), or None.
    concurrency: LimitsOf | None = None
    # Its singleton, throttle, debounce or batch per key (tasks._flow), or None.
    flow: FlowOf | None = None
    # Read-only handlers over a run's published state (`@task.query`), by name.
    queries: dict[str, Callable[..., Any]] = field(default_factory=dict, repr=False, compare=False)
    # Checks of updates at the sender's side, before anything is written (`@task.validate_update`).
    update_validators: dict[str, Callable[..., Any]] = field(default_factory=dict, repr=False,
                                                             compare=False)
    signature: inspect.Signature = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False, compare=False)
    # The parameters' type hints, which a submission's arguments are checked and coerced
    # against (its validator is built once, at the first check).
    arguments: TypedArguments = field(init=False, repr=False, compare=False)
    # A batched task's one parameter, which receives the list of items (tasks._flow.Batch);
    # None for any other task.
    batch_items: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # All computed once: on the hot path they cost more than the rest of a no-op run.
        signature = task_signature(self.name, self.fn, self.wants_context)
        items = None
        if self.flow is not None and self.flow.batches:
            items = batch_parameter(self.name, self.fn, self.wants_context)
        object.__setattr__(self, "batch_items", items)
        # What a submission binds: one item's arguments, by keyword, any names.
        object.__setattr__(self, "signature", signature if items is None else _ITEM)
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
        object.__setattr__(self, "arguments", TypedArguments(f"task {self.name!r}", self.fn,
                                                             signature.parameters.values()))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def query(self, fn: Callable[..., Any] | None = None, /, *,
              name: str | None = None) -> Any:
        """Register a query of this task's runs: `fn(view, **args)`, where `view` is the
        run's `RunView` (its published state, `ctx.set_state`, and its record). It runs
        where it is asked (`app.query`, HTTP), against the stored state, never in the
        run's process: a parked run, or one whose worker died, answers as well."""
        def register(handler: Callable[..., Any]) -> Callable[..., Any]:
            label = name or handler.__name__
            if not label.isidentifier():
                raise ConfigError(f"task {self.name!r}: a query's name is an identifier, got {label!r}")
            if label in self.queries:
                raise ConfigError(f"task {self.name!r} has a query {label!r} already")
            self.queries[label] = handler
            return handler

        return register(fn) if fn is not None else register

    def validate_update(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the check of update `name` of this task's runs: `fn(view, payload)`,
        run where the update is sent (`app.update`, HTTP), over the run's published state;
        raising (a ValueError, InvalidInput...) refuses the update with its message, and
        nothing is written: the run never sees it."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self.update_validators:
                raise ConfigError(f"task {self.name!r} validates update {name!r} already")
            self.update_validators[name] = fn
            return fn

        return register

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by keyword, checked against the signature (BadArguments if they don't fit)."""
        return bind_arguments(self.name, self.signature, args, kwargs)

    def received(self, args: str) -> dict[str, Any]:
        """The arguments a run stored (JSON text) as the function receives them: rebuilt by
        the same check that stored them (a model from its dict, a datetime from its text).
        Arguments that no longer fit (the task's hints changed since) end the run at once:
        a FinalError, since no retry can make them fit."""
        stored: dict[str, Any] = load(args)
        if not self.arguments.typed:
            return stored
        try:
            return self.arguments.validate(stored)
        except BadArguments as exc:
            raise FinalError(f"{exc} (the run's stored arguments do not fit the task)") from exc

    async def invoke(self, ctx: Any, kwargs: dict[str, Any]) -> Any:
        """Run the function once: coroutine functions on the loop, plain ones in a thread."""
        args = (ctx,) if self.wants_context else ()
        if self.is_async:
            return await self.fn(*args, **kwargs)
        return await in_thread(self.fn, *args, **kwargs)
