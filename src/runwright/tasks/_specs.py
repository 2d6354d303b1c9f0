"""Task registration: what `@app.task` records about a function."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core._arguments import TypedArguments
from ..errors import BadArguments, FinalError
from ._blocking import in_thread
from ._retry import RetryPolicy
from ._serde import bind_arguments, task_signature

__all__ = ["TaskSpec", "takes_context"]


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
    signature: inspect.Signature = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False, compare=False)
    # The parameters' type hints, which a submission's arguments are checked and coerced
    # against (its validator is built once, at the first check).
    arguments: TypedArguments = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # All computed once: on the hot path they cost more than the rest of a no-op run.
        signature = task_signature(self.name, self.fn, self.wants_context)
        object.__setattr__(self, "signature", signature)
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
        object.__setattr__(self, "arguments", TypedArguments(f"task {self.name!r}", self.fn,
                                                             signature.parameters.values()))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by keyword, checked against the signature (BadArguments if they don't fit)."""
        return bind_arguments(self.name, self.signature, args, kwargs)

    def received(self, args: str) -> dict[str, Any]:
        """The arguments a run stored (JSON text) as the function receives them: rebuilt by
        the same check that stored them (a model from its dict, a datetime from its text).
        Arguments that no longer fit (the task's hints changed since) end the run at once:
        a FinalError, since no retry can make them fit."""
        stored: dict[str, Any] = json.loads(args)
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
