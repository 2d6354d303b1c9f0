"""Budgets: bounds a run may not exceed. Exceeding one ends the run `failed` with the reason."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from ..errors import InvalidInput

__all__ = ["Budget"]


@dataclass(frozen=True, slots=True)
class Budget:
    """`max_cost_usd`: model spending (agents); `deadline_s`: from submission to the end,
    enforced by every worker's rescuer even when the run's own worker is dead;
    `max_turns`: model calls of an agent run. None means no bound."""

    max_cost_usd: float | None = None
    deadline_s: float | None = None
    max_turns: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_cost_usd", "deadline_s", "max_turns"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise InvalidInput(f"Budget.{name} must be a positive number, got {value!r}")

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_json(cls, text: str | None) -> Budget:
        return cls(**json.loads(text)) if text else cls()
