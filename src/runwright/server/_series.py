"""The dashboard's charts: throughput and latency percentiles per time bucket, and queue
depth over time.

Throughput and latencies come from the store, from the times of the runs that ended in
the window (the sample `/summary` reads, over a longer span): each bucket holds the runs
that ended in it. The sample is bounded; when the window held more ended runs than the
bound, the buckets older than the sample's oldest end are unknown (null), never zero.

Queue depth has no history in the store (a run keeps no record of when it waited), so
this server samples it: every `sample_s` for the operator's view, and at each request
for a tenant's (a tenant's depth is counted from its own runs only). The samples live
in this process: they start over when the server restarts, and each server of a
deployment keeps its own (they read the same store, so they agree).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Sequence

from ..observe._logs import event
from ..observe._metrics import percentiles

if TYPE_CHECKING:
    from ..client._scope import RunScope

__all__ = ["DepthHistory", "SERIES_SAMPLE", "buckets", "queue_depths"]

# An ended run's run_at, started_at (None: it never started) and finished_at, as
# `RunScope.ended_times` gives them (a face names no store module).
EndedTimes = tuple[float, "float | None", float]
SERIES_SAMPLE = 20_000  # ended runs read per request, at most
HISTORY_S = 3600.0  # how long depth samples are kept
MAX_TENANTS = 1000  # tenants whose depth history is kept (the least recently viewed go first)


def buckets(sample: Sequence[EndedTimes], now: float, window_s: float, step_s: float,
            limit: int = SERIES_SAMPLE) -> dict[str, object]:
    """Per bucket of `step_s` over the last `window_s`: runs ended, throughput per minute,
    and p50/p95/p99 of submit-to-start and run duration (as `/summary` defines them) of
    the runs that ended in it. Buckets end at the next multiple of `step_s` after now."""
    count = max(1, math.ceil(window_s / step_s))
    end = math.floor(now / step_s) * step_s + step_s
    start = end - count * step_s
    # A full sample may have left out older runs: before its oldest end, nothing is known.
    known_from = sample[-1][2] if len(sample) >= limit else start
    ended: list[list[EndedTimes]] = [[] for _ in range(count)]
    for row in sample:
        index = int((row[2] - start) // step_s)
        if 0 <= index < count:
            ended[index].append(row)
    t = [start + i * step_s for i in range(count)]
    known = [t[i] >= known_from for i in range(count)]
    waits: dict[str, list[float | None]] = {"p50": [], "p95": [], "p99": []}
    runs: dict[str, list[float | None]] = {"p50": [], "p95": [], "p99": []}
    for rows, ok in zip(ended, known):
        started = [(r, s, f) for r, s, f in rows if s is not None]
        wait = percentiles([max(0.0, s - r) for r, s, _ in started]) if ok else {}
        took = percentiles([max(0.0, f - s) for _, s, f in started]) if ok else {}
        for p in waits:
            waits[p].append(wait.get(p))
            runs[p].append(took.get(p))
    return {
        "t": t,
        "ended": [len(rows) if ok else None for rows, ok in zip(ended, known)],
        "throughput_per_min": [round(len(rows) * 60 / step_s, 3) if ok else None
                               for rows, ok in zip(ended, known)],
        "submit_to_start_s": waits,
        "run_duration_s": runs,
        "sample": len(sample),
        "complete_since": max(start, known_from),
    }


async def queue_depths(scope: RunScope, now: float) -> dict[str, int]:
    """Queued runs per queue, of the queues with a due run (as `/summary` counts them)."""
    return {queue: count for queue, state, count, oldest_due in await scope.queue_stats(now)
            if state == "queued" and oldest_due is not None}


class DepthHistory:
    """Queue depth samples per scope (None: the operator's), the last hour of them."""

    def __init__(self, sample_s: float) -> None:
        self.sample_s = sample_s
        self._samples: OrderedDict[str | None, deque[tuple[float, int]]] = OrderedDict()

    async def sample(self, scope: RunScope, who: str | None) -> tuple[float, dict[str, int]]:
        """Depth now, read from the store; kept as a sample unless one is younger than
        half a sampling interval. Returns (now, depth per queue)."""
        now = scope.now()
        depths = await queue_depths(scope, now)
        kept = self._samples.setdefault(who, deque())
        self._samples.move_to_end(who)
        while len(self._samples) > MAX_TENANTS:
            self._samples.popitem(last=False)
        if not kept or now - kept[-1][0] >= self.sample_s / 2:
            kept.append((now, sum(depths.values())))
        while kept and kept[0][0] < now - HISTORY_S:
            kept.popleft()
        return now, depths

    def history(self, who: str | None, since: float) -> list[tuple[float, int]]:
        return [(t, depth) for t, depth in self._samples.get(who, ()) if t >= since]

    async def run(self, scope: RunScope) -> None:
        """Sample the operator's view every `sample_s`, for as long as the server runs; a
        failed read (the store away) skips that sample."""
        while True:
            try:
                await self.sample(scope, None)
            except Exception as exc:  # a store blink: the chart has a gap, the next sample tries again
                event(logging.INFO, "queue depth sample skipped", error=str(exc))
            await asyncio.sleep(self.sample_s)
