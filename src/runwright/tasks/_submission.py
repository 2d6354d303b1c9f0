"""Building a submission: a TaskSpec and options -> the store's RunInsertParams.

One place checks what a submission may carry (priority, key, thread, busy policy, the
arguments against the task's type hints, the task's own `check`, the payload limit) and
turns it into what the store inserts, for `App.submit`, `App.submit_many`, a schedule's
definition and `ctx.submit` alike.

`OPTIONS` names the submission options, the keyword-only names of `submit` that every
face (library, CLI, HTTP) takes beside a task's arguments. No task parameter may take
one of these names (`@app.task` refuses it), so a task's arguments and the options of
its submission never collide.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Mapping

from ..core import _inputs as inputs
from ..core._payloads import load
from ..errors import InvalidInput, InvalidTime, KeyConflict, PayloadTooLarge
from ..observe._trace_context import check_traceparent
from ..runs import Run
from ..store._params import ON_BUSY, RunInsertParams
from ._budget import Budget
from ._flow import refuse_flow_with
from ._limits import Limits
from ._serde import due_at, finite
from ._specs import TaskSpec

__all__ = ["MAX_PRIORITY", "ON_CONFLICT", "OPTIONS", "PRIORITY_HELP", "Inserts", "Submission",
           "check_key_reuse", "check_on_conflict", "insert_params", "key_conflict", "parse_run_at",
           "priority_fault", "refuse_options_in", "run_at_of"]

# The submission options, in one place: `Submission` has a field for each (and
# `parent_id`, which only `ctx.submit` sets), `RunScope.submit` a keyword for each.
OPTIONS = ("budget", "connection", "delay_s", "key", "on_busy", "on_conflict", "priority", "queue",
           "run_at", "tenant", "thread", "traceparent")
# What a submission whose key names a run submitted otherwise does: "reject" raises
# KeyConflict (the default, as Stripe's idempotency keys answer); "return" gets that run.
ON_CONFLICT = ("reject", "return")

MAX_PRIORITY = 32767  # a SMALLINT in the stores
# What a priority is, as every face's help says it.
PRIORITY_HELP = (f"0..{MAX_PRIORITY}, lower runs first: rw.CRITICAL 0, HIGH 1, NORMAL 2 (a task's "
                 f"default), LOW 3.")


@dataclass(slots=True)
class Submission:
    """The options of one submission; None means "the task's default" (or none)."""

    key: str | None = None
    priority: int | None = None
    delay_s: float | None = None
    run_at: float | str | dt.datetime | None = None  # epoch s, aware datetime, or text (parse_run_at)
    queue: str | None = None
    budget: Budget | None = None
    thread: str | None = None
    on_busy: str = "reject"
    on_conflict: str = "reject"
    tenant: str | None = None
    parent_id: int | None = None
    traceparent: str | None = None  # W3C: the trace the run continues (None: its own)
    # The caller's open transaction on the store's database: the run exists if and only if
    # it commits (client `_connections`). Not the run's: nothing of it is stored.
    connection: Any = None


def insert_params(spec: TaskSpec, arguments: dict[str, Any], submission: Submission, *,
                  now_s: float, limits: Limits, version: str | None = None) -> RunInsertParams:
    """The checked insert of one run of `spec` with `arguments` (bound by keyword), as
    submitted by an app at `version` (recorded on the run); InvalidInput (or a subclass)
    names what is wrong, and nothing is written."""
    return Inserts(spec, submission, now_s=now_s, limits=limits, version=version).of(arguments)


class Inserts:
    """The inserts of runs of `spec` under one submission's options: the options are
    checked once, here (InvalidInput names what is wrong), and each run then costs only
    its arguments' check and encoding and its key. A submit_many's items without options
    of their own share one: the options' checks were half of checking an item."""

    __slots__ = ("_spec", "_what", "_limits", "_shared")

    def __init__(self, spec: TaskSpec, submission: Submission, *, now_s: float, limits: Limits,
                 version: str | None = None) -> None:
        priority = spec.priority if submission.priority is None else submission.priority
        _check_priority(priority)
        _check_key(submission.key)
        _check_queue(submission.queue)
        _check_tenant(submission.tenant)
        check_on_conflict(submission.on_conflict)
        _check_thread(submission.thread, submission.on_busy)
        traceparent = check_traceparent(submission.traceparent)
        if spec.flow is not None:
            refuse_flow_with(spec.name, submission.thread, submission.connection)
        budget = submission.budget
        self._spec = spec
        self._what = f"arguments of task {spec.name!r}"
        self._limits = limits
        # Every run's insert but its arguments, and its key when the submission names none.
        self._shared = RunInsertParams(
            key=submission.key or "",
            key_is_fresh=submission.key is None,
            task=spec.name,
            args="",
            queue=submission.queue or spec.queue,
            priority=priority,
            max_attempts=spec.retry.max_attempts,
            timeout_s=spec.timeout_s,
            run_at=due_at(now_s, submission.delay_s, run_at_of(submission.run_at)),
            parent_id=submission.parent_id,
            budget=budget.to_json() if budget is not None else None,
            deadline_at=now_s + budget.deadline_s if budget and budget.deadline_s else None,
            thread=submission.thread,
            on_busy=submission.on_busy,
            tenant=submission.tenant,
            traceparent=traceparent,
            version=version,
            now=now_s,
        )

    def of(self, arguments: dict[str, Any]) -> RunInsertParams:
        """The insert of one run with these arguments (bound by keyword): checked against
        the task's type hints and stored in their JSON form (see TypedArguments), then
        by the task's own `check`."""
        spec = self._spec
        items = spec.batch_items
        if items is not None:  # a batched task: the run's arguments are the list of items
            arguments = {items: [arguments]}
        if spec.arguments.typed:
            arguments = spec.arguments.to_json(arguments)
        if spec.check is not None:
            spec.check(arguments)
        shared = self._shared
        made = shared.remade(fresh_key() if shared.key_is_fresh else shared.key,
                             self._limits.payload(arguments, self._what))
        # A batch's keys are of the item (the submission's own arguments, in JSON form).
        keyed = arguments if items is None else _item_of(arguments, items)
        if spec.concurrency is not None:
            # Computed here, at the edge: a template naming an argument this submission
            # lacks is refused (InvalidInput) and nothing is written.
            made.limits = spec.concurrency.of(keyed, shared.tenant)
        if spec.flow is not None:
            made.flow = spec.flow.of(keyed, shared.tenant)
            if items is not None:
                made.merge = self._appender(items)
                made.items = _counter(items, made.merge, made.args)
            else:
                merge = getattr(spec.flow.declared, "merge", None)
                if merge is not None:
                    made.merge = self._merger(merge)
        return made

    def _appender(self, items: str) -> Any:
        """A batch's merge over stored texts: the new submission's item after the standing
        run's, stored as arguments are (the payload limit: a batch must fit it whole, see
        _counter)."""
        limits, what = self._limits, self._what

        def appended(standing: str, new: str) -> str:
            return limits.payload({items: load(standing)[items] + load(new)[items]}, what)

        return appended

    def _merger(self, merge: Any) -> Any:
        """A Debounce's merge over stored texts (RunInsertParams.merge): each opened (the
        codecs'), merged, and the result stored as a submission's arguments are, checked
        as they are (a dict; the task's `check`; the size limit)."""
        spec, limits, what = self._spec, self._limits, self._what

        def merged(standing: str, new: str) -> str:
            arguments = merge(load(standing), load(new))
            if not isinstance(arguments, dict):
                raise InvalidInput(f"the debounce merge of task {spec.name!r} returned "
                                   f"{type(arguments).__name__}, not a dict of arguments")
            if spec.check is not None:
                spec.check(arguments)
            return limits.payload(arguments, what)

        return merged


def _item_of(arguments: dict[str, Any], items: str) -> dict[str, Any]:
    item = arguments[items][0]
    if not isinstance(item, dict):  # a hint converted it to another shape
        raise InvalidInput(f"a batch's item is a dict of arguments, got {type(item).__name__}")
    return item


def _counter(items: str, append: Any, new: str) -> Any:
    """How many items a batch's stored arguments hold (store._flow_rules decides on it):
    as full when this submission's item would take them past the payload limit, so that
    it opens a new batch rather than be refused while the key's batch waits out its time."""

    def count(stored: str) -> int:
        held = load(stored).get(items)
        # Not a batch of this shape (the task's parameter was renamed since): full, so
        # that the submission opens a new batch rather than fail.
        if not isinstance(held, list):
            return sys.maxsize
        try:
            append(stored, new)
        except PayloadTooLarge:
            return sys.maxsize
        return len(held)

    return count


def check_key_reuse(run: Run, params: RunInsertParams, on_conflict: str) -> None:
    """Raise KeyConflict when `run`, which the store returned for `params`, is a run its key
    named already (`existed`) that was submitted otherwise, unless `on_conflict` is
    "return". Judged here, above every backend, from the run the store returned."""
    if on_conflict == "reject":
        conflict = key_conflict(run, params)
        if conflict is not None:
            raise conflict


def key_conflict(run: Run, params: RunInsertParams) -> KeyConflict | None:
    """How the existing run its key named differs from the submission `params` (None when it
    does not, or the run is new). A submission is its task, its arguments (as the canonical
    JSON the store would keep: key order and spacing aside) and the options that say what
    the run is and where it runs: queue, priority, thread and budget (each as in effect,
    the task's default when none was given). Not compared: its due time (a delay counts
    from each submission, and a run's due time moves as it retries and parks), `on_busy`
    (what to do at submission, not kept), its traceparent (each retry of a request may
    carry its own) and the submitting app's version."""
    if not run.existed or params.key_is_fresh:
        return None
    found: list[tuple[str, str]] = []
    if run.task != params.task:
        found.append(("task", f"task {run.task!r} (not {params.task!r})"))
    if not _same_json(run.args, params.args):
        found.append(("arguments", "other arguments"))
    options = (("queue", run.queue, params.queue), ("priority", run.priority, params.priority),
               ("thread", run.thread, params.thread))
    for name, theirs, ours in options:
        if theirs != ours:
            found.append((name, f"{name} {_shown(theirs)} (not {_shown(ours)})"))
    if not _same_json(run.budget, params.budget):
        found.append(("budget", f"budget {run.budget or 'none'} (not {params.budget or 'none'})"))
    if not found:
        return None
    return KeyConflict(params.key, run.id, [name for name, _ in found], ", ".join(how for _, how in found))


def _same_json(stored: str | None, given: str | None) -> bool:
    """Whether two JSON texts hold the same value, written alike: object keys in any order,
    any spacing (`1` and `1.0` differ, as `true` and `1` do: a task gets them as another type)."""
    if stored == given:
        return True
    if stored is None or given is None:
        return False
    return _canonical(stored) == _canonical(given)


def _canonical(text: str) -> str:
    return json.dumps(load(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _shown(value: str | int | None) -> str:
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value)


def fresh_key() -> str:
    """The key of a run submitted without one: 32 hex digits, the time in nanoseconds then
    64 random bits. It still dedupes a retried insert (the retry carries it), and keys in
    time order land at the right end of the key index, where a random key would land on a
    random page of it: a fifth of a PostgreSQL insert's cost once the index is large."""
    return f"{time.time_ns():016x}{os.urandom(8).hex()}"


def refuse_options_in(arguments: Mapping[str, Any], where: str = "args") -> None:
    """Refuse task arguments that name a submission option (no task parameter does): a face
    that takes arguments as one JSON object (HTTP, the CLI) says so, naming it, rather than
    letting `submit(task, **options, **arguments)` fail on a keyword given twice."""
    shadowing = sorted(set(arguments) & set(OPTIONS))
    if shadowing:
        said = f"{shadowing[0]!r} is a submission option, never a task's argument; give it beside {where}"
        raise InvalidInput(f"{where}.{shadowing[0]}: {said}", fields=[(f"{where}.{shadowing[0]}", said)])


def run_at_of(value: float | str | dt.datetime | None) -> float | dt.datetime | None:
    """`run_at` as `due_at` takes it: text (ISO 8601 with a time zone, or epoch seconds)
    is parsed by `parse_run_at`; numbers and datetimes pass as they are (`due_at` checks them)."""
    return parse_run_at(value) if isinstance(value, str) else value


def priority_fault(priority: Any) -> str | None:
    """What is wrong with a priority (None when nothing is): the one rule, which a
    submission's check (InvalidInput) and `@app.task(priority=)`'s (ConfigError) both say."""
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= MAX_PRIORITY:
        return f"priority must be an int in 0..{MAX_PRIORITY} (0 = most urgent), got {priority!r}"
    return None


def _check_priority(priority: Any) -> None:
    fault = priority_fault(priority)
    if fault is not None:
        raise InvalidInput(fault)


def _check_key(key: Any) -> None:
    if key is not None:
        inputs.key(key)


def _check_queue(queue: Any) -> None:
    if queue is not None:
        inputs.queue(queue)


def check_on_conflict(on_conflict: Any) -> None:
    if on_conflict not in ON_CONFLICT:
        raise InvalidInput(f"on_conflict must be one of {', '.join(ON_CONFLICT)}, got {on_conflict!r}")


def _check_thread(thread: Any, on_busy: Any) -> None:
    """A thread's name, and the busy policy: one of ON_BUSY, and other than the default
    "reject" only beside a thread (it says what to do when the thread has an open run: a
    submission to no thread that names one means a thread that was left out)."""
    if on_busy not in ON_BUSY:
        raise InvalidInput(f"on_busy must be one of {', '.join(ON_BUSY)}, got {on_busy!r}")
    if thread is None:
        if on_busy != "reject":
            raise InvalidInput(f"on_busy={on_busy!r} says what to do when a thread has an open run; "
                               f"give the thread too")
        return
    inputs.thread_name(thread)


def _check_tenant(tenant: Any) -> None:
    if tenant is not None:
        inputs.tenant(tenant)


def parse_run_at(value: Any) -> float:
    """A `run_at` as epoch seconds, from epoch seconds (a number or its text) or an ISO 8601
    time with a zone ("2026-12-01T09:00:00Z", "...+02:00"). A time without a zone is
    refused: read on two machines it would be two different instants."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return finite(value, "run_at")
    if not isinstance(value, str):
        raise InvalidTime(f"run_at must be epoch seconds or an ISO 8601 time, got {value!r}")
    try:
        seconds = float(value)
    except ValueError:
        return _iso_instant(value)
    return finite(seconds, "run_at")


def _iso_instant(value: str) -> float:
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidTime(f"run_at {value!r} is neither epoch seconds nor an ISO 8601 time "
                          f"(e.g. 2026-12-01T09:00:00Z)") from None
    if when.tzinfo is None:
        raise InvalidTime(f"run_at {value!r} has no time zone; add Z or an offset such as +02:00")
    return when.timestamp()
