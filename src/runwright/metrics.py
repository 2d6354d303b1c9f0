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

from collections import defaultdict
from typing import TYPE_CHECKING, Iterable

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from .engine.instruments import ATTEMPTS, FINISHED, LEASE_LOSSES, RUN_SECONDS, START_DELAY, TAKEOVERS

if TYPE_CHECKING:
    from .app import App
    from .scope import RunScope

__all__ = ["ATTEMPTS", "FINISHED", "LEASE_LOSSES", "RUN_SECONDS", "START_DELAY", "TAKEOVERS",
           "OTHER_QUEUE", "QueueStat", "fold_queues", "scrape", "summary"]

OTHER_QUEUE = "other"  # the label of every queue the deployment did not configure
QueueStat = tuple[str, str, int, "float | None"]  # queue, state, count, oldest due run_at (the App's)


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
    return generate_latest() + generate_latest(store_registry)


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


async def summary(scope: RunScope) -> dict[str, object]:
    """The JSON summary behind `runwright status` and the dashboard, of the runs `scope`
    sees (a tenant's view learns nothing about other tenants, not even counts)."""
    counts = await scope.count_by_state()
    now = scope.now()
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
        "oldest_due_age_s": round(max(oldest), 3) if oldest else 0.0,
        "queues": sorted({queue for queue, *_ in stats}),
        "queue_depths": {queue: count for queue, state, count, oldest_due in stats
                         if state == "queued" and oldest_due is not None},
    }
