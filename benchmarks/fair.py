"""Fair shares across tenants (rw.Fair, no concurrency limit): how long a small tenant's
run waits to start while a big tenant's backlog is queued, against alone, per backend.

    cd /work/main && .venv/bin/python -m benchmarks.fair [--backends sqlite,postgres,redis]
        [--workers 2] [--concurrency 16] [--backlog 20000] [--probes 20]

It prints figures; it asserts nothing. Per backend, `--workers` processes of
`--concurrency` slots run a task declared `fair=rw.Fair(key="{tenant}")` whose runs take
FAIR_RUN_S. A small tenant submits `--probes` runs one at a time (each submitted once the
one before started), alone, then again while a big tenant's `--backlog` runs are queued
(every slot busy with them). The start latency (the store's started_at - created_at) p50
and p99 of each, their ratio (the issue's goal: under 2x), and how many of the big
tenant's runs were still queued after the probes (none left would mean the probes
waited for the backlog, not for a turn).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import runwright as rw
from runwright.store._params import RunCountParams

from . import common
from .common import BenchError, p99, say

NAME = "fair"
FAIR_RUN_S = 0.01  # a run's length: the big tenant's runs keep every slot busy
PROBE_TIMEOUT_S = 120.0

COUNTS = [
    common.Count("--workers", 2, "worker processes", at_least=1),
    common.Count("--concurrency", 16, "slots per worker", at_least=1),
    common.Count("--backlog", 20_000, "the big tenant's queued runs", at_least=1),
    common.Count("--probes", 20, "the small tenant's runs, one at a time", at_least=2,
                 why="a percentile needs two values"),
]


async def shared(n: int) -> None:
    await asyncio.sleep(FAIR_RUN_S)


def with_tasks(target: rw.App) -> rw.App:
    target.task(fair=rw.Fair(key="{tenant}", name="tenants"))(shared)
    return target


# The app the worker processes load; they set RUNWRIGHT_URL before importing us.
app = with_tasks(rw.App())


@dataclass
class Figures:
    backend: str
    alone_ms: list[float] = field(default_factory=list)
    behind_ms: list[float] = field(default_factory=list)
    left: int | None = None
    notes: list[str] = field(default_factory=list)


async def probe(bench: rw.App, args: argparse.Namespace) -> list[float]:
    """The small tenant's start latency, ms, one run at a time."""
    out = []
    for i in range(args.probes):
        handle = await bench.submit("shared", n=i, tenant="small")
        deadline = time.perf_counter() + PROBE_TIMEOUT_S
        while True:
            run = await bench.store.run_get(handle.id)
            if run is not None and run.started_at is not None:
                break
            if time.perf_counter() > deadline:
                raise BenchError(f"the small tenant's run {handle.id} did not start within "
                                 f"{PROBE_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.005)
        out.append((run.started_at - run.created_at) * 1000)
    return out


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, args.concurrency, tmp,
                                      args.pg_url) as session:
        bench, workers = session.bench, session.workers
        await bench.open()
        workers.start(args.workers)
        await probe(bench, args)  # warm-up: the workers' first claims, listeners, caches
        figures.alone_ms = await probe(bench, args)
        say(backend, f"small tenant alone: start p50 {statistics.median(figures.alone_ms):.1f} ms "
                     f"p99 {p99(figures.alone_ms):.1f} ms")
        for start in range(0, args.backlog, 5000):
            batch = [{"n": i} for i in range(start, min(start + 5000, args.backlog))]
            await bench.submit_many("shared", batch, tenant="big")
        figures.behind_ms = await probe(bench, args)
        figures.left = (await bench.store.run_count_by_state(RunCountParams(tenant="big"))).get("queued", 0)
        say(backend, f"small tenant behind {args.backlog:,} of the big one's: start p50 "
                     f"{statistics.median(figures.behind_ms):.1f} ms p99 {p99(figures.behind_ms):.1f} ms "
                     f"({figures.left:,} of the big tenant's still queued)")
    return figures


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    def latency(which: str):  # type: ignore[no-untyped-def]
        def cell(f: Figures) -> str:
            values = getattr(f, which)
            return "-" if not values else f"{statistics.median(values):.1f} / {p99(values):.1f} ms"
        return cell

    def ratio(f: Figures) -> str:
        if not f.alone_ms or not f.behind_ms:
            return "-"
        return (f"{statistics.median(f.behind_ms) / statistics.median(f.alone_ms):.2f}x / "
                f"{p99(f.behind_ms) / p99(f.alone_ms):.2f}x")

    rows = [
        ("small tenant alone p50 / p99", latency("alone_ms")),
        (f"behind {args.backlog:,} of a big one", latency("behind_ms")),
        ("  ratio p50 / p99 (goal < 2x)", ratio),
        ("  big tenant's still queued", lambda f: "-" if f.left is None else f"{f.left:,}"),
    ]
    header = (f"{args.workers} workers x {args.concurrency}, runs of {FAIR_RUN_S * 1000:.0f} ms, "
              f"{args.probes} probes, no concurrency limit")
    return common.render_table(header, rows, all_figures)


if __name__ == "__main__":
    common.run_main(common.bench_all(common.parse_benchmark_args(__doc__, COUNTS), bench_backend, summary))
