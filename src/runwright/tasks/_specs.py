"""Task registration: what `@app.task` records about a function."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

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

    def __post_init__(self) -> None:
        # Both computed once: on the hot path they cost more than the rest of a no-op run.
        object.__setattr__(self, "signature", task_signature(self.name, self.fn, self.wants_context))
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by keyword, checked against the signature (BadArguments if they don't fit)."""
        return bind_arguments(self.name, self.signature, args, kwargs)

    async def invoke(self, ctx: Any, kwargs: dict[str, Any]) -> Any:
        """Run the function once: coroutine functions on the loop, plain ones in a thread."""
        args = (ctx,) if self.wants_context else ()
        if self.is_async:
            return await self.fn(*args, **kwargs)
        return await in_thread(self.fn, *args, **kwargs)
