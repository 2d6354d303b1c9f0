"""Concurrency per key: at most `max` runs of one key running at once, across the fleet.

Declared on a task (`@app.task(concurrency=Limit(...))`, one limit or a list of them). A
run's keys are computed at its submission, from its arguments and tenant, and stored on
the run as JSON `[[name, key, max], ...]` (`RunInsertParams.limits`): the store's claim
counts the runs RUNNING under each (name, key) and takes a run only while every one of
its limits has room, with no Python of the task's at claim time. An operator's override
of a limit's max (`app.set_limit`) is kept by the store and read at each claim.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..errors import ConfigError, InvalidInput

__all__ = ["NAME", "Limit", "LimitsOf", "check_key_template", "check_limit_max", "check_limit_target",
           "key_of", "limits_of", "slot_of"]

# A field of a key template: {tenant}, or {args.<name>} (a top-level argument).
_FIELD = re.compile(r"\{([^{}]*)\}")
# What a limit's name may hold: it is a metric label and the override's target, so
# neither ':' (which joins name and key in a target) nor spaces.
NAME = _NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
MAX_KEY_CHARS = 200


@dataclass(frozen=True, slots=True)
class Limit:
    """At most `max` runs of one key running at once across the fleet; the others stay
    queued, holding no worker's slot, and are claimed in their order as one ends.

    `key`: a template, "{tenant}" or "{args.customer_id}" (fields of the submission; a
    constant such as "all" makes one global limit), or a callable given the arguments
    (as stored, JSON values) and the tenant, returning the key. `name`: the limit's name,
    shared by every key it makes (the metric's label, what `app.set_limit` names);
    defaults to the task's name. Runs of several tasks share one limit's slots when they
    name the same limit."""

    key: str | Callable[[Mapping[str, Any], str | None], str]
    max: int
    name: str | None = None

    def __post_init__(self) -> None:
        check_limit_max(self.max, ConfigError)
        if self.name is not None and not _NAME.match(self.name):
            raise ConfigError(f"a Limit's name is 1..100 of letters, digits, '_', '.', '-', "
                              f"got {self.name!r}")
        check_key_template("Limit", self.key)


def check_key_template(what: str, key: Any) -> None:
    """A key as `Limit` takes it (and Singleton, Throttle and Debounce, tasks._flow): a
    template of {tenant} and {args.<argument>} fields, or a callable; ConfigError else."""
    if isinstance(key, str):
        for field in _FIELD.findall(key):
            if field != "tenant" and not (field.startswith("args.") and field[5:].isidentifier()):
                raise ConfigError(f"{what} key {key!r}: {{{field}}} is neither {{tenant}} nor "
                                  f"{{args.<argument>}}")
    elif not callable(key):
        raise ConfigError(f"a {what}'s key is a template or a callable, got {key!r}")


def key_of(task: str, name: str, key: str | Callable[[Mapping[str, Any], str | None], str],
           arguments: Mapping[str, Any], tenant: str | None, what: str = "limit") -> str:
    """One submission's key of a template or callable (checked by check_key_template):
    InvalidInput when a template names an argument the submission lacks, or the key is
    empty or too long. `what` and `name` are what its messages call the declaration."""
    if isinstance(key, str):
        made = _FIELD.sub(lambda m: _field(task, name, m.group(1), arguments, tenant, what), key)
    else:
        made = key(arguments, tenant)
        if not isinstance(made, str):
            raise InvalidInput(f"task {task!r}: {what} {name!r}'s key function returned "
                               f"{made!r}, not a str")
    if not made or len(made) > MAX_KEY_CHARS:
        raise InvalidInput(f"task {task!r}: {what} {name!r}'s key is 1..{MAX_KEY_CHARS} "
                           f"characters, got {made!r}")
    return made


def check_limit_max(value: Any, error: type[Exception] = InvalidInput) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1_000_000:
        raise error(f"a limit's max is an int in 0..1000000 (0 holds every run back), got {value!r}")
    return value


def check_limit_target(target: Any) -> str:
    """An override's target: a limit's name, or "<name>:<key>" for one key of it."""
    if not isinstance(target, str) or not target:
        raise InvalidInput(f"a limit is named by its name or <name>:<key>, got {target!r}")
    name, _, key = target.partition(":")
    if not _NAME.match(name):
        raise InvalidInput(f"limit {target!r}: its name is 1..100 of letters, digits, '_', '.', '-'")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"limit {target!r}: a key is at most {MAX_KEY_CHARS} characters")
    return target


def slot_of(name: str, key: str) -> str:
    """What the store counts runs under: one key of one limit."""
    return f"{name}:{key}"


class LimitsOf:
    """A task's limits, checked once at registration, named."""

    __slots__ = ("task", "limits", "rates")

    def __init__(self, task: str, declared: Limit | Sequence[Limit] | None,
                 rates: Sequence[Any] = ()) -> None:
        # `rates`: the task's rates per key (tasks._rates.Rate), kept in the same text.
        limits = [] if declared is None else [declared] if isinstance(declared, Limit) else list(declared)
        if (declared is not None and not limits) or not all(isinstance(limit, Limit) for limit in limits):
            raise ConfigError(f"task {task!r}: concurrency= takes a Limit or a list of them")
        named = [(limit.name or task, limit) for limit in limits]
        named_rates = [(rate.name or task, rate) for rate in rates]
        names = [name for name, _ in named + named_rates]
        if len(set(names)) != len(names):
            raise ConfigError(f"task {task!r}: its limits and rates need distinct names (name=...)")
        if not _NAME.match(task) and any(each.name is None for each in [*limits, *rates]):
            raise ConfigError(f"task {task!r}: its name cannot name a limit; give the Limit or Rate a name=")
        self.task = task
        self.limits = named
        self.rates = named_rates

    def of(self, arguments: Mapping[str, Any], tenant: str | None) -> str:
        """The run's limits as the store keeps them (JSON [[name, key, max], ...], then its
        rates' [name, key, max, per_s, cost]); InvalidInput when a template names an
        argument the submission lacks."""
        out: list[list[Any]] = [[name, key_of(self.task, name, limit.key, arguments, tenant), limit.max]
                                for name, limit in self.limits]
        out += [rate.entry(self.task, name, arguments, tenant) for name, rate in self.rates]
        return json.dumps(out, separators=(",", ":"))


def _field(task: str, name: str, field: str, arguments: Mapping[str, Any], tenant: str | None,
           what: str) -> str:
    if field == "tenant":
        if tenant is None:
            raise InvalidInput(f"task {task!r}: {what} {name!r} is per tenant; submit with tenant=")
        return tenant
    argument = field[5:]
    if argument not in arguments or arguments[argument] is None:
        raise InvalidInput(f"task {task!r}: {what} {name!r} is keyed by argument {argument!r}, which "
                           f"this submission does not give")
    value = arguments[argument]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


def limits_of(text: str | None) -> list[tuple[str, str, int]]:
    """A run's stored concurrency limits as (name, key, max) (its rates left out)."""
    if not text:
        return []
    return [(str(e[0]), str(e[1]), int(e[2])) for e in json.loads(text) if len(e) == 3]
