"""Flow control per key at submission: singleton, throttle, debounce and batch.

Declared on a task (`@app.task(singleton=Singleton(...))`, `throttle=Throttle(...)`,
`debounce=Debounce(...)`, `batch=Batch(...)`; one of the four per task). A run's key is computed at its
submission from its arguments and tenant, with the templates of `Limit`
(tasks._concurrency: "{tenant}", "{args.order_id}", a constant, or a callable), and
carried to the store as `RunInsertParams.flow`. The store decides, in the write that
inserts the run and under a lock of the key (store._flow_rules), so concurrent
submitters in any number of processes see one order; the run it returns says what was
done (`Run.outcome`: new, replaced, delayed, debounced, batched, dropped).

`Batch` collects the submissions of one key into one run: its task takes one parameter,
the list of the submissions' arguments (each a dict by name, in their JSON form); a
submission gives the keyword arguments of one item (checked in `_submission`), and
joins the key's queued run while it has room (the store's update of a debounce, with an
append for its merge).

`Singleton(on_conflict="wait")` is a concurrency limit of 1 on the key (it is turned
into a `Limit` named "singleton.<name>" at registration): every submission is inserted,
and the key's runs run one at a time, each claimed as the one before ends.
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import ConfigError, InvalidInput
from ..store._flow_rules import MAX_PERIOD_S
from ._concurrency import NAME, Limit, check_key_template, key_of

__all__ = ["Batch", "Debounce", "FlowOf", "Singleton", "Throttle", "batch_parameter", "refuse_flow_with"]

KeyFn = Callable[[Mapping[str, Any], str | None], str]
SINGLETON_MODES = ("refuse", "replace", "wait")
THROTTLE_MODES = ("drop", "delay")
# The longest period or window: a day; past it a schedule says what is meant. Retention
# keeps a throttle key's record that long past its due time (store._flow_rules).
MAX_SECONDS = MAX_PERIOD_S
# The most items of one batch: its run's arguments are written whole at each submission
# that joins it, so a batch costs the square of its size (and must fit the payload limit).
MAX_ITEMS = 10_000


@dataclass(frozen=True, slots=True)
class Singleton:
    """At most one queued-or-running run per key. A submission while the key has one:
    `on_conflict="refuse"` (the default) raises SingletonTaken naming that run, and
    nothing is written; "replace" cancels that run if it is still queued (reason:
    "replaced by run N") and inserts this one, but refuses (SingletonTaken) when it is
    running: a running run is never replaced; "wait" inserts this one, held until the
    key's run ends (a concurrency limit of 1 on the key, named "singleton.<name>").
    `key` and `name` as `Limit`'s (name defaults to the task's)."""

    key: str | KeyFn
    on_conflict: str = "refuse"
    name: str | None = None

    def __post_init__(self) -> None:
        check_key_template("Singleton", self.key)
        _check_name("Singleton", self.name)
        if self.on_conflict not in SINGLETON_MODES:
            raise ConfigError(f"Singleton on_conflict is one of {', '.join(SINGLETON_MODES)}, "
                              f"got {self.on_conflict!r}")


@dataclass(frozen=True, slots=True)
class Throttle:
    """At most one run per `per_s` seconds per key, counted by due times: a run is due
    no sooner than `per_s` after the due time of the key's run before it. A submission
    sooner: `on_excess="drop"` (the default) writes nothing and returns the key's
    standing run (outcome "dropped"); "delay" inserts it due at the next allowed time
    (outcome "delayed"; its `waiting` says "throttle" until then). A run never starts
    before it is due, so starts are at least `per_s` apart unless a backlog held the
    earlier one past its due time."""

    key: str | KeyFn
    per_s: float
    on_excess: str = "drop"
    name: str | None = None

    def __post_init__(self) -> None:
        check_key_template("Throttle", self.key)
        _check_name("Throttle", self.name)
        _check_seconds("Throttle per_s", self.per_s)
        if self.on_excess not in THROTTLE_MODES:
            raise ConfigError(f"Throttle on_excess is one of {', '.join(THROTTLE_MODES)}, "
                              f"got {self.on_excess!r}")


@dataclass(frozen=True, slots=True)
class Debounce:
    """The last submission within `window_s` wins. A submission is due `window_s` after
    it is made; while the key's run is still queued (not started), a new submission
    gives it its arguments and moves its due time to now + `window_s`, and gets its id
    back (outcome "debounced"). Once the run started, a new submission opens a new
    window (a new run).

    `merge(standing, new)`: the arguments the key's queued run takes instead of the new
    submission's, from its own and the new ones (each a dict of arguments by name, in
    their JSON form, as stored). It runs in the submitting process, under the key's lock
    on SQLite and PostgreSQL, or is re-run on Redis when the run changed meanwhile: each
    submission's arguments are merged exactly once, whatever the submitters race. An
    exception it raises reaches the submitter, and nothing is written."""

    key: str | KeyFn
    window_s: float
    name: str | None = None
    merge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        check_key_template("Debounce", self.key)
        _check_name("Debounce", self.name)
        _check_seconds("Debounce window_s", self.window_s)
        if self.merge is not None and not callable(self.merge):
            raise ConfigError(f"Debounce merge is a function (standing, new) -> arguments, "
                              f"got {self.merge!r}")


@dataclass(frozen=True, slots=True)
class Batch:
    """Submissions of one key collected into one run of up to `max_items` of them, or
    whatever came within `max_wait_s` of the first. The task takes one parameter (after
    `ctx`, if it takes one): the list of the submissions' arguments, each a dict by name
    in their JSON form, in the order the store took them. A submission gives one item's
    keyword arguments (`submit(task, order_id="o-1", line=3)`); while the key's run is
    queued, not started and holds fewer than `max_items`, the submission joins it and
    gets its id back (outcome "batched"), else it opens a new batch: a new run, due
    `max_wait_s` later (outcome "new"). The submission that fills a batch makes it due
    now. Every submission lands in exactly one run, whatever the submitters race."""

    key: str | KeyFn
    max_items: int
    max_wait_s: float
    name: str | None = None

    def __post_init__(self) -> None:
        check_key_template("Batch", self.key)
        _check_name("Batch", self.name)
        if (not isinstance(self.max_items, int) or isinstance(self.max_items, bool)
                or not 1 <= self.max_items <= MAX_ITEMS):
            raise ConfigError(f"Batch max_items is a whole number in 1..{MAX_ITEMS}, got {self.max_items!r}")
        _check_seconds("Batch max_wait_s", self.max_wait_s)


Flow = Singleton | Throttle | Debounce | Batch


class FlowOf:
    """A task's flow control, checked once at registration."""

    __slots__ = ("task", "name", "declared", "kind", "mode", "seconds")

    def __init__(self, task: str, declared: Flow) -> None:
        name = declared.name or task
        if not NAME.match(name):
            raise ConfigError(f"task {task!r}: its name cannot name a {type(declared).__name__}; "
                              f"give it a name=")
        self.task, self.name, self.declared = task, name, declared
        if isinstance(declared, Singleton):
            self.kind, self.mode, self.seconds = "singleton", declared.on_conflict, 0.0
        elif isinstance(declared, Throttle):
            self.kind, self.mode, self.seconds = "throttle", declared.on_excess, float(declared.per_s)
        elif isinstance(declared, Debounce):
            self.kind, self.mode, self.seconds = "debounce", "", float(declared.window_s)
        else:  # the store reads the most items from the mode
            self.kind, self.mode, self.seconds = "batch", str(declared.max_items), float(declared.max_wait_s)

    @staticmethod
    def declared_of(task: str, singleton: Singleton | None, throttle: Throttle | None,
                    debounce: Debounce | None, batch: Batch | None = None) -> FlowOf | None:
        """The task's one flow control (None: none); ConfigError for two, or a wrong type."""
        given = [(what, value, kind) for what, value, kind in (
            ("singleton", singleton, Singleton), ("throttle", throttle, Throttle),
            ("debounce", debounce, Debounce), ("batch", batch, Batch)) if value is not None]
        for what, value, kind in given:
            if not isinstance(value, kind):
                raise ConfigError(f"task {task!r}: {what}= takes a {kind.__name__}, got {value!r}")
        if len(given) > 1:
            raise ConfigError(f"task {task!r}: one of singleton=, throttle=, debounce=, batch= per task, "
                              f"got {', '.join(what for what, _, _ in given)}")
        return FlowOf(task, given[0][1]) if given else None

    @property
    def batches(self) -> bool:
        return self.kind == "batch"

    @property
    def waits(self) -> bool:
        """Singleton(on_conflict="wait"): a concurrency limit, not a decision at insert."""
        return self.kind == "singleton" and self.mode == "wait"

    def limit(self) -> Limit:
        """The concurrency limit of 1 that Singleton(on_conflict="wait") is."""
        return Limit(key=self.declared.key, max=1, name=f"singleton.{self.name}")

    def of(self, arguments: Mapping[str, Any], tenant: str | None) -> str:
        """The run's flow as the store takes it (store._flow_rules.Flow): JSON
        [kind, name, key, mode, seconds]; InvalidInput as `Limit`'s keys."""
        key = key_of(self.task, self.name, self.declared.key, arguments, tenant, self.kind)
        return json.dumps([self.kind, self.name, key, self.mode, self.seconds], separators=(",", ":"))


def _check_name(what: str, name: str | None) -> None:
    if name is not None and not NAME.match(name):
        raise ConfigError(f"a {what}'s name is 1..100 of letters, digits, '_', '.', '-', got {name!r}")


def _check_seconds(what: str, value: Any) -> None:
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or not 0 < value <= MAX_SECONDS):
        raise ConfigError(f"{what} is seconds in (0, {int(MAX_SECONDS)}], got {value!r}")


def batch_parameter(task: str, fn: Callable[..., Any], takes_context: bool) -> str:
    """The one parameter of a batched task (after `ctx`), which receives the list of items;
    ConfigError naming the task when it takes none, more, or only by position or as
    *args/**kwargs."""
    params = list(inspect.signature(fn).parameters.values())[1 if takes_context else 0:]
    if len(params) != 1 or params[0].kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY):
        shown = ", ".join(p.name for p in params) or "none"
        raise ConfigError(f"task {task!r}: a batched task takes one parameter (after ctx), the list of "
                          f"the submissions' arguments, e.g. `async def {task}(items: list[dict]) -> None`; "
                          f"it takes {shown}")
    return params[0].name


def refuse_flow_with(task: str, thread: str | None, connection: Any) -> None:
    """A task with flow control is submitted through the store's own insert, under its
    key's lock: not to a thread, nor in the caller's transaction."""
    if thread is not None:
        raise InvalidInput(f"task {task!r} has flow control (singleton, throttle, debounce or batch); "
                           f"it cannot be submitted to a thread")
    if connection is not None:
        raise InvalidInput(f"task {task!r} has flow control (singleton, throttle, debounce or batch); "
                           f"submit it after your transaction commits, not with connection=")
