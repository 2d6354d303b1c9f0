"""Fair shares across keys: runs of one key (a tenant) do not hold back another key's.

Declared on a task (`@app.task(fair=Fair(key="{tenant}"))`). A run's key is computed at
its submission, as a concurrency limit's (tasks._concurrency: the same templates and
functions), and carried in the run's limits text as `["fair/<name>", key, 1]`
(store._fair_rules.PREFIX): the store's claim takes such runs key by key, each key's
share of the claims in proportion to its weight (1 unless the operator set one,
`app.set_weight`). See store._fair_rules for what "fair" means exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..errors import ConfigError, InvalidInput
from ..store._fair_rules import PREFIX
from ._concurrency import NAME, Limit, LimitsOf, check_key_template, check_limit_target, key_of

__all__ = ["MAX_WEIGHT", "Fair", "FairLimitsOf", "check_weight", "weight_target"]

MAX_WEIGHT = 10_000


@dataclass(frozen=True, slots=True)
class Fair:
    """Claim this task's runs in turns across keys: among the keys with runs due, the
    next run comes from the key served least (by weight), so one key's backlog delays
    another key's run by at most one claim; within a key, priority, due time, submission.

    `key`: a template ("{tenant}", "{args.customer_id}") or a callable given the arguments
    and the tenant, as `Limit`'s. `name`: what the keys are shared and weighted under
    (default: the task's name); tasks naming the same one take turns together."""

    key: str | Callable[[Mapping[str, Any], str | None], str]
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None and not NAME.match(self.name):
            raise ConfigError(f"a Fair's name is 1..100 of letters, digits, '_', '.', '-', got {self.name!r}")
        check_key_template("Fair", self.key)


def check_weight(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_WEIGHT:
        raise InvalidInput(f"a fair key's weight is an int in 1..{MAX_WEIGHT}, got {value!r}")
    return value


def weight_target(target: Any) -> str:
    """The store's override target of a weight: "<name>" (every key) or "<name>:<key>"."""
    return PREFIX + check_limit_target(target)


class FairLimitsOf(LimitsOf):
    """A task's limits and rates (maybe none) and its fair key: the run's limits text
    carries them all."""

    __slots__ = ("fair_name", "fair_key")

    def __init__(self, task: str, declared: Limit | Sequence[Limit] | None, fair: Fair,
                 rates: Sequence[Any] = ()) -> None:
        if not isinstance(fair, Fair):
            raise ConfigError(f"task {task!r}: fair= takes a Fair, got {fair!r}")
        super().__init__(task, declared, rates)
        if fair.name is None and not NAME.match(task):
            raise ConfigError(f"task {task!r}: its name cannot name a fair key; give the Fair a name=")
        self.fair_name = fair.name or task
        self.fair_key = fair.key

    def of(self, arguments: Mapping[str, Any], tenant: str | None) -> str:
        out: list[list[Any]] = json.loads(super().of(arguments, tenant))
        out.append([PREFIX + self.fair_name,
                    key_of(self.task, self.fair_name, self.fair_key, arguments, tenant, "fair key"), 1])
        return json.dumps(out, separators=(",", ":"))
