"""Fleet broadcast benchmark: the round trip of `app.fleet.broadcast("ping")` to 3 and to
10 worker processes, per backend (p50/p99 over `--broadcasts` broadcasts each).

    .venv/bin/python -m benchmarks.fleet_broadcast [--backends sqlite,redis]
        [--broadcasts 200] [--pg-url URL]

It prints figures; it asserts nothing. A round trip is from the call to the report: the
census read, the op sent, every worker's ack and applied reply received. A broadcast
whose report is not all `applied` is counted and noted, and its time still measured.
The worker processes import this module (`benchmarks.fleet_broadcast:app`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import runwright as rw

from . import common

app = rw.App()


@app.task
async def idle(ctx: rw.Context) -> None:
    """A worker needs a task; the benchmark submits none."""


@dataclass
class Figures:
    backend: str
    notes: list[str] = field(default_factory=list)
    round_trip_s: dict[int, tuple[float, float]] = field(default_factory=dict)  # n -> (p50, p99)


COUNTS = [common.Count("--broadcasts", 200, "broadcasts measured per fleet size", at_least=10,
                       why="a p99 needs a few values")]
SIZES = (3, 10)


async def wait_ready(bench: rw.App, count: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = await bench.fleet.workers()
        if sum(1 for r in rows if r["state"] == "ready") >= count:
            return
        await asyncio.sleep(0.2)
    raise common.BenchError(f"{count} workers did not read ready within {timeout_s:.0f} s")


async def measure(bench: rw.App, figures: Figures, size: int, broadcasts: int) -> None:
    for _ in range(5):  # warm up: connections, prepared statements, script caches
        await bench.fleet.broadcast("ping", timeout_s=10)
    times, not_applied = [], 0
    for _ in range(broadcasts):
        began = time.perf_counter()
        report = await bench.fleet.broadcast("ping", timeout_s=10)
        times.append(time.perf_counter() - began)
        if len(report) != size or any(r.outcome != "applied" for r in report):
            not_applied += 1
    figures.round_trip_s[size] = (statistics.median(times), common.p99(times))
    if not_applied:
        figures.notes.append(f"{not_applied} of {broadcasts} broadcasts to {size} were not all applied")
    common.say(figures.backend, f"{size} processes: p50 {figures.round_trip_s[size][0] * 1000:.1f} ms, "
                                f"p99 {figures.round_trip_s[size][1] * 1000:.1f} ms")


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, "fleet_broadcast", lambda a: a, 1, tmp, args.pg_url) as b:
        await b.bench.open()
        started = 0
        for size in SIZES:
            b.workers.start(size - started)
            started = size
            await wait_ready(b.bench, size)
            await measure(b.bench, figures, size, args.broadcasts)
    return figures


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    lines = [f"fleet broadcast round trip (ping), {args.broadcasts} broadcasts per size:",
             f"{'backend':10} " + " ".join(f"{f'{n} procs p50/p99':>22}" for n in SIZES)]
    for figures in all_figures:
        cells = []
        for size in SIZES:
            pair = figures.round_trip_s.get(size)
            cells.append(f"{pair[0] * 1000:9.1f} / {pair[1] * 1000:7.1f} ms" if pair else f"{'-':>22}")
        lines.append(f"{figures.backend:10} " + " ".join(f"{c:>22}" for c in cells))
        lines.extend(f"  note: {note}" for note in figures.notes)
    return "\n".join(lines)


if __name__ == "__main__":
    common.run_main(common.bench_all(common.parse_benchmark_args(__doc__, COUNTS), bench_backend, summary))
