"""One instrumentation seam: each thing a worker observes is counted once, here.

The process's Prometheus metrics (labels from fixed sets: task, queue, outcome, never a
run or thread id) and the worker's own `WorkerStats` are two views of the same calls,
with the same outcome names, so they cannot drift apart.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Sequence

from prometheus_client import Counter, Gauge, Histogram

from ..core._clock import utc
from ..core._journal import StepRecord
from ..observe import _spans as telemetry
from ..observe._trace_context import RunTrace
from ..runs import TERMINAL_STATES, Run, RunState
from ..store._params import RunFinishParams
from ._tallies import HotCounter, HotHistogram

__all__ = ["ATTEMPTS", "CLAIM_BATCH", "DEFERRALS", "FINISH_BATCH_SECONDS", "FINISHED", "LEASE_LOSSES",
           "LEASE_RENEWALS", "OUTCOMES", "RUN_SECONDS", "SHUTDOWN_RUNS", "START_DELAY", "TAKEOVERS",
           "UNRUNNABLE", "Instruments", "WorkerStats", "outcome_of_finish"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                   300, 900, 3600)

# Counted once per run: the hot path's own counter and histogram (_tallies.py).
ATTEMPTS = HotCounter("runwright_attempts_total", "Attempts started (claims).", ["task"])
FINISHED = HotCounter("runwright_attempts_finished_total", "Attempts ended, by how.", ["task", "outcome"])
LEASE_LOSSES = Counter("runwright_lease_losses_total", "Writes refused because a newer claim owns the run.")
TAKEOVERS = Counter("runwright_takeovers_total", "Runs taken back from lost workers (by this process).")
START_DELAY = HotHistogram("runwright_submit_to_start_seconds",
                           "Queue wait: from due (submitted, or its delay or backoff over) to started.",
                           ["queue"], buckets=LATENCY_BUCKETS)
RUN_SECONDS = HotHistogram("runwright_attempt_seconds", "Attempt duration, by outcome.",
                           ["task", "outcome"], buckets=LATENCY_BUCKETS)
LEASE_RENEWALS = Counter("runwright_lease_renewals_total",
                         "Lease renewals of running runs: renewed; lost (a newer claim owns the run, "
                         "found at a renewal or a re-read: it is abandoned); failed (the store did not "
                         "answer).", ["outcome"])
CLAIM_BATCH = Histogram("runwright_claim_batch_size", "Runs per claim that found work.",
                        buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
FINISH_BATCH_SECONDS = Histogram("runwright_finish_batch_seconds",
                                 "Commit latency: one batched, fenced write of attempts' ends.",
                                 buckets=LATENCY_BUCKETS)
DEFERRALS = Counter("runwright_deferrals_total", "Runs put off to later, by reason: sleep, children "
                    "(parked, holding no slot), retry (a backoff after a failed attempt).", ["reason"])
SHUTDOWN_RUNS = Counter("runwright_shutdown_runs_total", "Runs in flight at a graceful stop, by how "
                        "they left: drained (ended within the grace) or given_back (to the queue).", ["how"])
UNRUNNABLE = Gauge("runwright_unrunnable_runs", "Due runs that no live worker can run: none registers "
                   "the task for the run's major, or serves its queue (checked every orphan_check_s; "
                   "closed failed after unrunnable_after_s).")
UNRUNNABLE_CLOSED = Counter("runwright_unrunnable_closed_total", "Runs closed failed (Unrunnable) by this "
                            "worker's rescuer: no live worker could run them for unrunnable_after_s.")
DEFERRAL_REASONS = ("sleep", "children")  # what a park gives as its reason; others count as "other"

# Outcome labels: a fixed set, whatever kinds of events an attempt may end with.
OUTCOMES = ("succeeded", "failed", "dead", "cancelled", "interrupted", "retrying", "released",
            "parked", "paused")


def outcome_of_finish(finish: RunFinishParams) -> str:
    """How an attempt ended, as one of OUTCOMES."""
    if finish.kind in OUTCOMES:
        return finish.kind
    if finish.state is RunState.QUEUED:
        return "released" if finish.release else "retrying"
    return finish.state  # a StrEnum is its own value (Enum.value is a slow property)


@dataclass
class WorkerStats:
    """One worker's counts since it started (logged when it stops)."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0
    interrupted: int = 0
    retrying: int = 0
    released: int = 0
    parked: int = 0
    paused: int = 0
    lease_lost: int = 0
    rescued: int = 0
    started_at: float = field(default_factory=time.time)

    def logged(self) -> dict[str, object]:
        """The counts as a log line's fields, the start as every face writes an instant."""
        return {**vars(self), "started_at": utc(self.started_at)}


class Instruments:
    """What a worker reports; each call feeds the metrics and the worker's stats.

    The labelled children are looked up once per label set and kept: `labels()` takes a
    lock and builds tuples, which per run was a tenth of a busy worker's time."""

    def __init__(self) -> None:
        self.stats = WorkerStats()
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def claimed(self, run: Run) -> None:
        self.stats.claimed += 1
        ATTEMPTS.inc((run.task,))
        if run.started_at is not None:
            START_DELAY.observe((run.queue,), max(0.0, run.started_at - run.run_at))

    def attempt_span(self, run: Run, worker_id: int) -> AbstractContextManager[Any]:
        """The span of this claim's execution, under the run's own span (see tracing)."""
        if not telemetry.active():
            return nullcontext()
        trace = RunTrace.of(run)
        return telemetry.span(f"attempt {run.task}", trace, trace.attempt_span_id(run.fence),
                              trace.root_span_id, {
                                  "runwright.run.id": run.id, "runwright.task": run.task,
                                  "runwright.queue": run.queue, "runwright.attempt": run.attempt,
                                  "runwright.fence": run.fence, "runwright.worker": worker_id,
                                  "runwright.recoveries": run.recoveries})

    def finished(self, run: Run, finish: RunFinishParams, duration_s: float, worker_id: int = 0,
                 span: Any = None) -> None:
        """An attempt's end, once it is durable (a refused write is `lease_lost` instead).
        An end of the run also closes the run's own span."""
        outcome = outcome_of_finish(finish)
        setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
        FINISHED.inc((run.task, outcome))
        RUN_SECONDS.observe((run.task, outcome), duration_s)
        if outcome == "parked":
            reason = json.loads(finish.event_data).get("reason")
            self._child(DEFERRALS, reason if reason in DEFERRAL_REASONS else "other").inc()
        elif outcome == "retrying":
            self._child(DEFERRALS, "retry").inc()
        telemetry.outcome(span, outcome)
        if finish.state in TERMINAL_STATES:
            telemetry.run_ended(run, finish.state.value, worker_id)

    def claimed_batch(self, size: int) -> None:
        if size:
            CLAIM_BATCH.observe(size)

    def renewed(self, renewed: int, failed: int) -> None:
        """One lease renewal of the worker's live runs: how many were renewed, and how
        many not because the store did not answer (those found lost: `lease_found_lost`)."""
        for outcome, count in (("renewed", renewed), ("failed", failed)):
            if count:
                self._child(LEASE_RENEWALS, outcome).inc(count)

    def lease_found_lost(self) -> None:
        """A live run's lease is another claim's now (found at a renewal or a re-read)."""
        self._child(LEASE_RENEWALS, "lost").inc()

    def finish_batch(self, duration_s: float) -> None:
        FINISH_BATCH_SECONDS.observe(duration_s)

    def shut_down(self, drained: int, given_back: int) -> None:
        SHUTDOWN_RUNS.labels("drained").inc(drained)
        SHUTDOWN_RUNS.labels("given_back").inc(given_back)

    def unrunnable(self, count: int) -> None:
        UNRUNNABLE.set(count)

    def unrunnable_closed(self, count: int) -> None:
        UNRUNNABLE_CLOSED.inc(count)

    def lease_lost(self, span: Any = None) -> None:
        self.stats.lease_lost += 1
        LEASE_LOSSES.inc()
        telemetry.outcome(span, "lease_lost")

    def rescued(self, run: Run, worker_id: int = 0, journal: Sequence[StepRecord] = ()) -> None:
        """A run taken over from a lost worker: its lost claim's span is ended here, and
        the spans of the steps that claim journaled are emitted from `journal`."""
        self.stats.rescued += 1
        TAKEOVERS.inc()
        telemetry.attempt_lost(run, worker_id)
        telemetry.steps_lost(run, journal, worker_id)
        if run.state in TERMINAL_STATES:  # it kept killing its workers: dead
            telemetry.run_ended(run, run.state.value, worker_id)
