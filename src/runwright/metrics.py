"""Prometheus metrics. Labels come from fixed sets (state, queue, task, outcome), never
run or thread ids, so the number of series stays bounded.

Two kinds: what this process saw (counters and histograms that a worker updates as it
works, exposed by `runwright worker --metrics-port` and by the server), and what the
store says (depths, oldest due age, runs by state, workers), read at scrape time.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .store.params import RunCountParams, RunQueueStatsParams

if TYPE_CHECKING:
    from .app import App

__all__ = ["ATTEMPTS", "FINISHED", "LEASE_LOSSES", "RUN_SECONDS", "START_DELAY", "TAKEOVERS",
           "scrape", "summary"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                   300, 900, 3600)

ATTEMPTS = Counter("runwright_attempts_total", "Attempts started (claims).", ["task"])
FINISHED = Counter("runwright_attempts_finished_total", "Attempts ended, by how.", ["task", "outcome"])
LEASE_LOSSES = Counter("runwright_lease_losses_total", "Writes refused because a newer claim owns the run.")
TAKEOVERS = Counter("runwright_takeovers_total", "Runs taken back from lost workers (by this process).")
START_DELAY = Histogram("runwright_submit_to_start_seconds", "From due to started, per claim.",
                        ["queue"], buckets=LATENCY_BUCKETS)
RUN_SECONDS = Histogram("runwright_attempt_seconds", "Attempt duration, by outcome.",
                        ["task", "outcome"], buckets=LATENCY_BUCKETS)


async def scrape(app: App) -> bytes:
    """This process's metrics and the store's, in the Prometheus text format."""
    store_registry = CollectorRegistry()
    depth = Gauge("runwright_queue_depth", "Queued runs that are due.", ["queue"], registry=store_registry)
    oldest = Gauge("runwright_oldest_due_age_seconds", "How long the oldest due run has waited.",
                   ["queue"], registry=store_registry)
    by_state = Gauge("runwright_runs", "Runs by state.", ["queue", "state"], registry=store_registry)
    workers = Gauge("runwright_workers_alive", "Registered workers.", registry=store_registry)
    now = time.time()
    for queue, state, count, oldest_due in await app.store.run_queue_stats(RunQueueStatsParams(now=now)):
        by_state.labels(queue, state).set(count)
        if state == "queued":
            depth.labels(queue).set(count if oldest_due is not None else 0)
            oldest.labels(queue).set(now - oldest_due if oldest_due is not None else 0)
    workers.set(len(await app.store.worker_list()))
    return generate_latest() + generate_latest(store_registry)


async def summary(app: App, tenant: str | None = None) -> dict[str, object]:
    """The JSON summary behind `runwright status` and the dashboard (of one tenant's runs
    when given: a tenant learns nothing about the others, not even counts)."""
    counts = await app.store.run_count_by_state(RunCountParams(tenant))
    now = time.time()
    stats = await app.store.run_queue_stats(RunQueueStatsParams(tenant, now))
    oldest = [now - o for _, state, _, o in stats if state == "queued" and o is not None]
    return {
        "queued": counts.get("queued", 0),
        "running": counts.get("running", 0),
        "succeeded": counts.get("succeeded", 0),
        "failed": counts.get("failed", 0),
        "dead": counts.get("dead", 0),
        "cancelled": counts.get("cancelled", 0),
        "workers_alive": len(await app.store.worker_list()),
        "oldest_due_age_s": round(max(oldest), 3) if oldest else 0.0,
        "queues": sorted({queue for queue, *_ in stats}),
        "queue_depths": {queue: count for queue, state, count, oldest_due in stats
                         if state == "queued" and oldest_due is not None},
    }
