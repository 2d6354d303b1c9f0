"""Backoff policies: when a failed attempt is retried, and after how long."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..errors import FinalError, InvalidInput, KeyConflict, TransactionsUnsupported

__all__ = ["FINAL", "ON_EXHAUSTED", "Backoff", "RetryPolicy"]

# What a run whose attempts ran out may become (RetryPolicy.on_exhausted).
ON_EXHAUSTED = ("dead", "pause")

# Errors that no retry can change, whatever a policy says. A KeyConflict (ctx.submit's, or
# app.submit's inside a task) is not a FinalError, since a submitter outside any task gets
# it too, but the run its key names stays as it was submitted: a retry would meet it again.
# Nor does a store that keeps no SQL transaction come to keep one (TransactionsUnsupported).
FINAL: tuple[type[BaseException], ...] = (FinalError, KeyConflict, TransactionsUnsupported)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: `min(cap_s, base_s * factor**(attempt-1))`, then
    spread by +-`jitter` (a fraction) so that runs failing together do not retry together.

    Defaults to base 1 s, factor 2, cap 5 minutes, jitter 0.2.
    """

    base_s: float = 1.0
    factor: float = 2.0
    cap_s: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.factor < 1 or self.cap_s < 0 or not 0 <= self.jitter <= 1:
            raise InvalidInput(f"bad backoff {self}: need base_s>=0, factor>=1, cap_s>=0, 0<=jitter<=1")

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before the attempt after `attempt` (1-based) failed."""
        raw = min(self.cap_s, self.base_s * self.factor ** max(0, attempt - 1))
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return max(0.0, raw * (1 + spread))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a run gets and which errors deserve another.

    `retry_on` (if given) limits retries to those exception types; `give_up_on`,
    `FinalError` and `KeyConflict` (see FINAL) end the run `failed` at once. Defaults to
    3 retries (4 attempts).
    """

    retries: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    retry_on: tuple[type[BaseException], ...] | None = None
    give_up_on: tuple[type[BaseException], ...] = ()
    # What a run whose attempts ran out becomes: "dead" (the dead-letter queue) or "pause":
    # held at the failing step (its journal kept, its error shown) until an operator
    # resumes it (the step runs again, on the code deployed then) or cancels it. For a
    # task's policy; a step's own in-place retries end in the run's policy.
    on_exhausted: str = "dead"

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise InvalidInput(f"retries must be >= 0, got {self.retries}")
        if self.on_exhausted not in ON_EXHAUSTED:
            raise InvalidInput(f"on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, "
                               f"got {self.on_exhausted!r}")

    @property
    def max_attempts(self) -> int:
        return self.retries + 1

    def is_final(self, error: BaseException) -> bool:
        """True when no retry should be tried for this error, whatever attempts remain."""
        if isinstance(error, FINAL) or isinstance(error, self.give_up_on):
            return True
        return self.retry_on is not None and not isinstance(error, self.retry_on)
