"""Rate per key: at most `max` (runs, or their weighted cost) started per `per_s` seconds
of one key, across the fleet.

Declared on a task (`@app.task(rate=Rate(...))`, one rate or a list of them). A run's keys
and its cost are computed at its submission, from its arguments and tenant, and stored
with its concurrency limits in the run's limits text (`RunInsertParams.limits`), a rate as
`[name, key, max, per_s, cost]` beside a concurrency limit's `[name, key, max]`: a run
with a rate takes the limited claim, which starts it only while its key's spends of the
last `per_s` seconds leave room for its cost, and records the spend in the claim's own
write (store._rate_rules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..errors import ConfigError, InvalidInput
from ._concurrency import NAME, check_key_template, check_limit_max, key_of

__all__ = ["MAX_PER_S", "Rate", "rate_entry", "rates_declared"]

MAX_PER_S = 366 * 86400.0  # a year: a window longer than that is a mistake, not a rate
Cost = None | int | float | str | Callable[[Mapping[str, Any], str | None], float]


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `max` started per `per_s` seconds per key (in any window of that length),
    counted in runs, or in a weighted `cost` per run (a model call's tokens); a run over
    its rate stays queued until the spends of its key leave room for it.

    `key`: as a `Limit`'s ("{tenant}", "{args.customer_id}", a constant, or a callable of
    the arguments and tenant). `cost`: None (each run costs 1), a number, a template
    naming one argument ("{args.tokens}", a number), or a callable of the arguments and
    tenant returning a number; computed at submission, and a cost over `max` is refused
    there (InvalidInput: it could never start). `name`: the rate's name, what
    `app.set_limit` and the metrics name; defaults to the task's."""

    key: str | Callable[[Mapping[str, Any], str | None], str]
    max: int
    per_s: float
    cost: Cost = None
    name: str | None = None

    def __post_init__(self) -> None:
        check_limit_max(self.max, ConfigError)
        if (not isinstance(self.per_s, (int, float)) or isinstance(self.per_s, bool)
                or not 0 < self.per_s <= MAX_PER_S or not math.isfinite(self.per_s)):
            raise ConfigError(f"a Rate's per_s is a number of seconds in (0, {MAX_PER_S:.0f}], "
                              f"got {self.per_s!r}")
        if self.name is not None and not NAME.match(self.name):
            raise ConfigError(f"a Rate's name is 1..100 of letters, digits, '_', '.', '-', "
                              f"got {self.name!r}")
        check_key_template("Rate", self.key)
        cost = self.cost
        if isinstance(cost, bool):
            raise ConfigError(f"a Rate's cost is a number, a template or a callable, got {cost!r}")
        if isinstance(cost, (int, float)):
            _number(cost, ConfigError, "a Rate's cost")
        elif isinstance(cost, str):
            if not (cost.startswith("{args.") and cost.endswith("}") and cost[6:-1].isidentifier()):
                raise ConfigError(f"a Rate's cost template is one argument, \"{{args.<name>}}\", "
                                  f"got {cost!r}")
        elif cost is not None and not callable(cost):
            raise ConfigError(f"a Rate's cost is a number, a template or a callable, got {cost!r}")


    def entry(self, task: str, name: str, arguments: Mapping[str, Any], tenant: str | None) -> list[Any]:
        """One run's entry of this rate in its limits text (rate_entry)."""
        return rate_entry(task, name, self, arguments, tenant)


def _number(value: Any, error: type[Exception], what: str) -> float:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value < 0):
        raise error(f"{what} is a number >= 0, got {value!r}")
    return float(value)


def rate_entry(task: str, name: str, rate: Rate, arguments: Mapping[str, Any],
               tenant: str | None) -> list[Any]:
    """One run's entry of a rate in its limits text: [name, key, max, per_s, cost].
    InvalidInput when the key or the cost cannot be made from this submission, or the
    cost is over `max` (no window could ever hold it)."""
    key = key_of(task, name, rate.key, arguments, tenant, "rate")
    cost: Any = rate.cost
    if cost is None:
        cost = 1
    elif isinstance(cost, str):
        argument = cost[6:-1]
        if argument not in arguments or arguments[argument] is None:
            raise InvalidInput(f"task {task!r}: rate {name!r} costs argument {argument!r}, which this "
                               f"submission does not give")
        cost = arguments[argument]
    elif callable(cost):
        cost = cost(arguments, tenant)
    made = _number(cost, InvalidInput, f"task {task!r}: rate {name!r}'s cost")
    if made > rate.max:
        raise InvalidInput(f"task {task!r}: rate {name!r}: a cost of {cost!r} is over its max of {rate.max} "
                           f"per {rate.per_s:g} s, so it could never start")
    # Whole numbers stay ints in the text: runs of one key and cost share one text.
    return [name, key, rate.max, rate.per_s, int(made) if made.is_integer() else made]


def rates_declared(task: str, declared: Rate | Sequence[Rate] | None) -> list[Rate]:
    """A task's `rate=`, as a list (ConfigError for what is not a Rate)."""
    if declared is None:
        return []
    rates = [declared] if isinstance(declared, Rate) else list(declared)
    if not rates or not all(isinstance(rate, Rate) for rate in rates):
        raise ConfigError(f"task {task!r}: rate= takes a Rate or a list of them")
    return rates
