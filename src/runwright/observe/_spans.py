"""Spans of runs, attempts and steps, through the OpenTelemetry API.

Nothing happens until a tracer provider is set (by `runwright worker`, see `otel_setup`,
or by the user's own code): until then `opentelemetry` is not even imported, so an
untraced worker pays one dict lookup per span, and `import runwright` stays fast.

Span ids come from `tracing.RunTrace` (derived, so that every machine names the same
span alike). The SDK asks its IdGenerator for a new span's id with no arguments, so the
derived ids travel to it in a context variable for the duration of `start_span`, and
`otel_setup.DerivedIds` hands them out. (The alternative, building SpanContexts and
ReadableSpans by hand, would re-implement the SDK's span life cycle, sampling and
processors.) Under a provider of the user's without that generator, the trace is still
continued (every span's parent context is built from the derived ids), only the span
ids themselves are random.

Attributes are names, ids, attempt, position and outcome only: never arguments,
results, messages or error messages, which may hold a user's data.
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from ..core._journal import SNAPSHOT, StepRecord
from ..runs import Run
from ._trace_context import RunTrace

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = ["DERIVED_IDS", "FAILED_OUTCOMES", "active", "annotate", "attempt_lost", "outcome", "run_ended",
           "span", "steps_lost"]

TRACER_NAME = "runwright"
# (trace id, span id) for the span being started: read by otel_setup.DerivedIds.
DERIVED_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "runwright_derived_ids", default=None)
_tracer_cache: dict[int, Tracer] = {}
_UNKNOWN = object()  # an API without the `_TRACER_PROVIDER` global: ask it the public way
# Read once: OpenTelemetry loads a provider named there at the first get_tracer_provider().
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
Attributes = Mapping[str, str | int | float | bool]
FAILED_OUTCOMES = frozenset({"failed", "dead", "retrying", "worker_lost"})


def _tracer() -> Tracer | None:
    """The tracer of the global provider, or None while no provider has been set."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:  # nobody imported OpenTelemetry, so nobody set a provider up
        return None
    # Libraries import the API without setting a provider (redis-py 8 does), and then
    # get_tracer_provider() looks an environment variable up at every call: a few spans a
    # run made that a twentieth of a busy worker's time. The API's own global says "none
    # set"; a provider named by that variable is still loaded by the public call.
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_FROM_ENV:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    tracer = _tracer_cache.get(id(provider))
    if tracer is None:
        _tracer_cache.clear()
        tracer = _tracer_cache[id(provider)] = provider.get_tracer(TRACER_NAME)
    return tracer


def active() -> bool:
    """True once a tracer provider is set: callers skip deriving ids for no one."""
    return _tracer() is not None


def _start(tracer: Tracer, name: str, trace: RunTrace, span_id: int, parent_span_id: int | None,
           attributes: Attributes, start_time_ns: int | None = None) -> Span:
    from opentelemetry import trace as api
    from opentelemetry.context import Context

    context = Context()
    if parent_span_id is not None:
        flags = api.TraceFlags(api.TraceFlags.SAMPLED if trace.sampled else api.TraceFlags.DEFAULT)
        parent = api.SpanContext(trace.trace_id, parent_span_id, is_remote=True, trace_flags=flags)
        context = api.set_span_in_context(api.NonRecordingSpan(parent))
    token = DERIVED_IDS.set((trace.trace_id, span_id))
    try:
        return tracer.start_span(name, context, attributes=attributes, start_time=start_time_ns,
                                 record_exception=False, set_status_on_exception=False)
    finally:
        DERIVED_IDS.reset(token)


@contextmanager
def span(name: str, trace: RunTrace, span_id: int, parent_span_id: int | None,
         attributes: Attributes) -> Iterator[Span | None]:
    """A span around the block, current inside it (a user's own spans nest under it);
    None when nothing traces. An exception marks it an error by its type only."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    from opentelemetry import trace as api

    started = _start(tracer, name, trace, span_id, parent_span_id, attributes)
    with api.use_span(started, end_on_exit=True, record_exception=False,
                      set_status_on_exception=False):
        try:
            yield started
        except BaseException as exc:
            ended = _outcome_of_exception(exc)
            started.set_attribute("runwright.outcome", ended)
            if ended == "failed":
                started.set_status(api.Status(api.StatusCode.ERROR, type(exc).__name__))
                started.set_attribute("error.type", type(exc).__name__)
            raise


def _outcome_of_exception(exc: BaseException) -> str:
    """Control flow of the engine (a park, an interrupt, a stop) is not an error."""
    name = type(exc).__name__
    if name in ("Park", "Interrupted"):
        return name.lower()
    if name == "CancelledError":
        return "stopped"
    return "failed"


def annotate(current: Span | None, **attributes: str | int | float | bool | None) -> None:
    """Add attributes to `current` (or to the current span), skipping None values."""
    if current is None:
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None or _tracer() is None:
            return
        current = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            current.set_attribute(name, value)


def outcome(current: Span | None, name: str) -> None:
    """How the span's work ended (an engine outcome): an error status when it failed."""
    if current is None:
        return
    current.set_attribute("runwright.outcome", name)
    if name in FAILED_OUTCOMES:
        from opentelemetry import trace as api

        current.set_status(api.Status(api.StatusCode.ERROR, name))


def attempt_lost(run: Run, worker_id: int) -> None:
    """The span of a claim whose worker died (SIGKILL, a lost machine): that worker never
    ended it, so the worker that takes the run over emits it in its stead, under the same
    id (derived), from the claim's start to the takeover, so that the steps it did finish
    keep their parent in the trace."""
    tracer = _tracer()
    if tracer is None or run.started_at is None:
        return
    trace = RunTrace.of(run)
    lost = _start(tracer, f"attempt {run.task}", trace, trace.attempt_span_id(run.fence),
                  trace.root_span_id, {
                      "runwright.run.id": run.id, "runwright.task": run.task,
                      "runwright.queue": run.queue, "runwright.attempt": run.attempt,
                      "runwright.fence": run.fence, "runwright.rescuer": worker_id},
                  start_time_ns=int(run.started_at * 1e9))
    outcome(lost, "worker_lost")
    lost.end(time.time_ns())


def steps_lost(run: Run, journal: Sequence[StepRecord], worker_id: int) -> None:
    """The spans of the steps a lost claim (the `run` just taken over, its fence) had
    journaled. Its worker ended each span as the step completed, but a SIGKILL takes the
    exporter's buffer with the process: what the journal holds is all that is durable, so
    the worker that takes over emits those spans again from it, under the same derived
    ids. A collector may thus receive such a span twice (the same trace, span id, parent
    and name), never zero times. The journal keeps when a step was recorded, not when it
    began: such a span starts where the claim's previous step ended (or the claim began),
    and says `runwright.span.from_journal`."""
    tracer = _tracer()
    if tracer is None or run.started_at is None:
        return
    trace = RunTrace.of(run)
    began_ns = int(run.started_at * 1e9)
    for record in sorted(journal, key=lambda r: r.position):
        if record.fence != run.fence or record.status not in ("done", "failed"):
            continue
        ended_ns = max(began_ns, int(record.created_at * 1e9))
        if _spanned(record.name):
            _step_from_journal(tracer, run, trace, record, began_ns, ended_ns, worker_id)
        began_ns = ended_ns


def _spanned(name: str) -> bool:
    """Whether a journal entry's operation is a span (`ctx.step`, a tool or model call, a
    child's submission): a snapshot, a sleep and a question's answer are not."""
    return name not in (SNAPSHOT, "sleep", "ask") and not name.startswith("approve:")


def _step_from_journal(tracer: Tracer, run: Run, trace: RunTrace, record: StepRecord, began_ns: int,
                       ended_ns: int, worker_id: int) -> None:
    step = _start(tracer, record.name, trace, trace.step_span_id(record.fence, record.position),
                  trace.attempt_span_id(record.fence), {
                      "runwright.run.id": run.id, "runwright.step.name": record.name,
                      "runwright.step.position": record.position, "runwright.attempt": run.attempt,
                      "runwright.fence": record.fence, "runwright.span.from_journal": True,
                      "runwright.rescuer": worker_id}, start_time_ns=began_ns)
    if record.status == "failed":
        from opentelemetry import trace as api

        error_type = str(json.loads(record.error or "{}").get("type", "Error"))  # a type name only
        step.set_attribute("runwright.outcome", "failed")
        step.set_attribute("error.type", error_type)
        step.set_status(api.Status(api.StatusCode.ERROR, error_type))
    step.end(ended_ns)


def run_ended(run: Run, result: str, worker_id: int) -> None:
    """The run's own span, from its submission to now, emitted once by the worker whose
    write ended it: the root under which every attempt's span sits."""
    tracer = _tracer()
    if tracer is None:
        return
    trace = RunTrace.of(run)
    attributes: dict[str, Any] = {"runwright.run.id": run.id, "runwright.task": run.task,
                                  "runwright.queue": run.queue, "runwright.attempt": run.attempt,
                                  "runwright.worker": worker_id}
    if run.parent_id is not None:
        attributes["runwright.parent.id"] = run.parent_id
    root = _start(tracer, f"run {run.task}", trace, trace.root_span_id, trace.parent_span_id,
                  attributes, start_time_ns=int(run.created_at * 1e9))
    outcome(root, result)
    root.end(time.time_ns())
