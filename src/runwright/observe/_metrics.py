"""Prometheus metrics and the JSON summary. Labels come from fixed sets (state, queue,
task, outcome), never run or thread ids, so the number of series stays bounded.

A queue name is a submitter's choice, so the store's gauges label a queue by name only
when the deployment configured it (a task's or a schedule's queue, or one its workers
serve); every other queue is counted under `other`. The scrape covers every tenant's
runs, so the server serves it to the operator only.

Two kinds: what this process saw (counters and histograms that a worker updates as it
works, through the engine's one instrumentation seam, `engine.instruments`; exposed by
`runwright worker --metrics-port` and by the server), and what the store says (depths,
oldest due age, runs by state, workers), asked of the App at scrape time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ..engine._instruments import (
    ATTEMPTS,
    FINISHED,
    LEASE_LOSSES,
    RUN_SECONDS,
    START_DELAY,
    TAKEOVERS,
    UNRUNNABLE,
)

if TYPE_CHECKING:
    from ..app import App
    from ..client._scope import RunScope

__all__ = ["ATTEMPTS", "FINISHED", "LEASE_LOSSES", "RUN_SECONDS", "START_DELAY", "TAKEOVERS",
           "LATENCY_SAMPLE", "LATENCY_WINDOW_S", "OTHER_QUEUE", "QueueStat", "fold_queues",
           "latency_summary", "limits_summary", "percentiles", "scrape", "summary"]

OTHER_QUEUE = "other"  # the label of every queue the deployment did not configure
QueueStat = tuple[str, str, int, "float | None"]  # queue, state, count, oldest due run_at (the App's)
# The summary's latencies: of the runs ended in the last 15 minutes, the latest 2000 at most
# (a bounded read, whatever the load); throughput: runs ended in the last minute.
LATENCY_WINDOW_S = 900.0
LATENCY_SAMPLE = 2000
THROUGHPUT_WINDOW_S = 60.0


async def scrape(app: App) -> bytes:
    """This process's metrics and the store's, in the Prometheus text format."""
    store_registry = CollectorRegistry()
    depth = Gauge("runwright_queue_depth", "Queued runs that are due.", ["queue"], registry=store_registry)
    oldest = Gauge("runwright_oldest_due_age_seconds", "How long the oldest due run has waited.",
                   ["queue"], registry=store_registry)
    by_state = Gauge("runwright_runs", "Runs by state.", ["queue", "state"], registry=store_registry)
    workers = Gauge("runwright_workers_alive", "Registered workers.", registry=store_registry)
    now = app.now()
    alive = await app.list_workers()
    known = _configured_queues(app) | {queue for worker in alive for queue in worker.queues}
    for queue, state, count, oldest_due in fold_queues(await app.queue_stats(now), known):
        by_state.labels(queue, state).set(count)
        if state == "queued":
            depth.labels(queue).set(count if oldest_due is not None else 0)
            oldest.labels(queue).set(now - oldest_due if oldest_due is not None else 0)
    workers.set(len(alive))
    _limit_gauges(await app.limits(), store_registry)
    _weight_gauges(await app.weights(), store_registry)
    # The store's word at scrape time (a worker's rescuer also sets it at each orphan check):
    # a server that runs no worker reports it too.
    UNRUNNABLE.set(await app.count_unrunnable())
    return generate_latest() + generate_latest(store_registry)


def _limit_gauges(uses: Sequence[Any], registry: CollectorRegistry) -> None:
    """Concurrency limits by name (declared in code: a fixed set), never by key (a tenant,
    a customer: a submitter's value): runs running and queued under them, and how many of
    their keys are full (the runs queued under those wait for their limit)."""
    running = Gauge("runwright_limit_running", "Runs running under a concurrency limit.", ["limit"],
                    registry=registry)
    queued = Gauge("runwright_limit_queued", "Runs queued under a concurrency limit.", ["limit"],
                   registry=registry)
    full = Gauge("runwright_limit_keys_full", "Keys of a concurrency limit at their max.", ["limit"],
                 registry=registry)
    by_name: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    _rate_gauges([use for use in uses if use.per_s is not None], registry)
    for use in uses:
        if use.per_s is not None:  # a rate's: its own gauges
            continue
        totals = by_name[use.name]
        totals[0] += use.running
        totals[1] += use.queued
        totals[2] += int(use.running >= use.max and (use.running or use.queued) > 0)
    for name, (r, q, f) in by_name.items():
        running.labels(name).set(r)
        queued.labels(name).set(q)
        full.labels(name).set(f)


def _rate_gauges(uses: Sequence[Any], registry: CollectorRegistry) -> None:
    """Rates per key by name (never by key, as concurrency limits): the cost started in
    their keys' windows now, runs queued under them, and how many keys' windows hold their max."""
    spent = Gauge("runwright_rate_spent", "Cost started under a rate in its keys' windows now.", ["rate"],
                  registry=registry)
    queued = Gauge("runwright_rate_queued", "Runs queued under a rate.", ["rate"], registry=registry)
    full = Gauge("runwright_rate_keys_full", "Keys of a rate whose window holds its max.", ["rate"],
                 registry=registry)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    for use in uses:
        totals = by_name[use.name]
        totals[0] += use.spent
        totals[1] += use.queued
        totals[2] += int(use.spent >= use.max)
    for name, (s, q, f) in by_name.items():
        spent.labels(name).set(s)
        queued.labels(name).set(q)
        full.labels(name).set(f)


def _weight_gauges(weights: dict[str, int], registry: CollectorRegistry) -> None:
    """The operator's weights of fair keys (`set_weight`) by the Fair's name, never by key:
    the weight set for every key of a name, and how many of its keys have one of their own."""
    every = Gauge("runwright_fair_weight", "The weight the operator set for every key of a fair name "
                  "(1 when none).", ["fair"], registry=registry)
    keyed = Gauge("runwright_fair_keys_weighted", "Keys of a fair name with a weight of their own.",
                  ["fair"], registry=registry)
    names: dict[str, list[int]] = defaultdict(lambda: [1, 0])
    for target, weight in weights.items():
        name, separator, _key = target.partition(":")
        if separator:
            names[name][1] += 1
        else:
            names[name][0] = weight
    for name, (weight, count) in names.items():
        every.labels(name).set(weight)
        keyed.labels(name).set(count)


def limits_summary(uses: Sequence[Any]) -> list[dict[str, object]]:
    """The keys of concurrency limits and rates in use (the App's `LimitUse`s), for the
    operator's summary; a rate's with its window (`per_s`) and the cost started in it."""
    return [{"limit": use.name, "key": use.key, "running": use.running, "queued": use.queued,
             "max": use.max, **({"per_s": use.per_s, "spent": use.spent} if use.per_s is not None else {})}
            for use in uses if use.running or use.queued or use.spent]


def _configured_queues(app: App) -> set[str]:
    """The queues the deployment's code names: its tasks' and its schedules' ("default" too)."""
    registry = app.registry
    return ({"default"} | {spec.queue for spec in registry.tasks.values()}
            | {schedule.queue for schedule in registry.schedules.values() if schedule.queue})


def fold_queues(stats: Iterable[QueueStat], known: set[str]) -> list[QueueStat]:
    """`stats` with every queue outside `known` summed into OTHER_QUEUE (counts added, the
    oldest due run_at kept), so that a submitter's queue names never become label values."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    oldest: dict[tuple[str, str], float | None] = {}
    for queue, state, count, oldest_due in stats:
        label = (queue if queue in known else OTHER_QUEUE, state)
        counts[label] += count
        earlier = oldest.get(label)
        if earlier is None or (oldest_due is not None and oldest_due < earlier):
            oldest[label] = oldest_due
    return [(queue, state, count, oldest[queue, state]) for (queue, state), count in counts.items()]


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p95 and p99 by nearest rank (a value that occurred), rounded to the ms."""
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for p in (50, 95, 99):
        out[f"p{p}"] = round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], 3) if ordered else None
    return out


def latency_summary(sample: Sequence[tuple[float, float | None, float]], now: float,
                    limit: int = LATENCY_SAMPLE) -> dict[str, object]:
    """Percentiles and throughput from the store's sample of ended runs (latest ended
    first). Submit-to-start is due-to-start of the run's last claim (its run_at is when
    it became due: a delay or a retry's backoff is not waiting); run duration is that
    claim's start to the run's end. A run ended before it started (a cancel) counts in
    throughput only. More than `limit` runs in the last minute: the rate over the
    sample's span, flagged as an estimate."""
    started = [(run_at, started_at, finished_at) for run_at, started_at, finished_at in sample
               if started_at is not None]
    recent = [finished_at for _, _, finished_at in sample if finished_at >= now - THROUGHPUT_WINDOW_S]
    estimated = len(sample) >= limit and len(recent) == len(sample)
    span_s = max(1e-3, now - sample[-1][2]) if estimated else THROUGHPUT_WINDOW_S
    return {
        "latency_window_s": LATENCY_WINDOW_S,
        "latency_sample": len(sample),
        "submit_to_start_s": percentiles([max(0.0, s - r) for r, s, _ in started]),
        "run_duration_s": percentiles([max(0.0, f - s) for _, s, f in started]),
        "throughput_per_min": round(len(recent) * 60 / span_s, 2),
        "throughput_estimated": estimated,
    }


async def summary(scope: RunScope) -> dict[str, object]:
    """The JSON summary behind `runwright status` and the dashboard, of the runs `scope`
    sees (a tenant's view learns nothing about other tenants, not even counts)."""
    counts = await scope.count_by_state()
    now = scope.now()
    sample = await scope.ended_times(now - LATENCY_WINDOW_S, LATENCY_SAMPLE)
    stats = await scope.queue_stats(now)
    oldest = [now - o for _, state, _, o in stats if state == "queued" and o is not None]
    return {
        "queued": counts.get("queued", 0),
        "running": counts.get("running", 0),
        "succeeded": counts.get("succeeded", 0),
        "failed": counts.get("failed", 0),
        "dead": counts.get("dead", 0),
        "cancelled": counts.get("cancelled", 0),
        "workers_alive": len(await scope.list_workers()),
        # Due runs no live worker can run (their task, for their major, or their queue):
        # closed failed after the workers' unrunnable_after_s.
        "unrunnable": await scope.count_unrunnable(),
        "oldest_due_age_s": round(max(oldest), 3) if oldest else 0.0,
        "queues": sorted({queue for queue, *_ in stats}),
        "queue_depths": {queue: count for queue, state, count, oldest_due in stats
                         if state == "queued" and oldest_due is not None},
        **latency_summary(sample, now),
        # The operator's alone: a key names a tenant or a customer, another tenant's too.
        **({"limits": limits_summary(await scope.limit_uses()), "weights": await scope.fair_weights()}
           if scope.tenant_name is None else {}),
    }
