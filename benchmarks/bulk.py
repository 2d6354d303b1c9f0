"""Bulk retry by filter beside retrying by id: 10,000 dead runs re-queued by their error text.

    cd /work/main && .venv/bin/python -m benchmarks.bulk [--backends sqlite,postgres,redis] [--runs 10000]

A worker in this process drains four sets of --runs runs of a task that fails (retries=0), each
set with its own error text, so every run ends dead. Then each set is re-queued another way,
nothing running them again (the worker has stopped):
- bulk: `app.bulk("retry", error=<its text>, limit=--runs)`, which pages through the filter and
  retries each run by the same checked, fenced operation as one by id, with progress;
- by id, in batches: `app.retry_many(ids)` for --batch ids at a time (the ids known beforehand);
- by id, concurrently: `app.retry(id)` for --batch ids at a time under `asyncio.gather`, the
  fastest a caller who knows the ids can go through the library;
- two bulk retries of one filter at once: how many runs each re-queued, and whether any run
  was re-queued twice (it must not be: the second to reach a run is refused, RunNotRetryable).
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import runwright as rw
from runwright.runs import RunState
from runwright.store._params import RunCountParams

from . import common
from .common import say

NAME = "bulk"
_ALL = RunCountParams()
SETS = ("bulk", "batches", "gathered", "twice")

COUNTS = [
    common.Count("--runs", 10_000, "dead runs in each set", at_least=1),
    common.Count("--batch", 500, "ids a call (by id, in batches) or gathered at once", at_least=1),
    common.Count("--concurrency", 200, "the draining worker's slots", at_least=1),
]


async def doomed(ctx: rw.Context, kind: str) -> None:
    raise RuntimeError(f"doomed-{kind}: the set this run belongs to")


def with_tasks(app: rw.App) -> rw.App:
    app.task(name="doomed", retries=0)(doomed)
    return app


app = with_tasks(rw.App())


@dataclass
class Figures:
    backend: str
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    progress_calls: int = 0
    twice: tuple[int, int, int] | None = None  # done by the first, by the second, by both


async def dead_sets(bench: rw.App, runs: int, concurrency: int) -> dict[str, list[int]]:
    ids = {}
    for kind in SETS:
        handles = await bench.submit_many("doomed", [{"kind": kind}] * runs)
        ids[kind] = [h.id for h in handles]
    worker = bench.worker(concurrency=concurrency, poll_s=0.05)
    running = asyncio.create_task(worker.run())
    try:
        want = runs * len(SETS)
        while (await bench.store.run_count_by_state(_ALL)).get(RunState.DEAD.value, 0) < want:
            await asyncio.sleep(0.2)
    finally:
        worker.stop()
        await running
    return ids


async def measure(bench: rw.App, args: argparse.Namespace, figures: Figures) -> None:
    began = time.perf_counter()
    ids = await dead_sets(bench, args.runs, args.concurrency)
    say(figures.backend, f"{args.runs * len(SETS):,} dead runs made in {time.perf_counter() - began:.1f} s")

    def progressed(_acted: int, _matched: int) -> None:
        figures.progress_calls += 1

    began = time.perf_counter()
    report = await bench.bulk("retry", error="doomed-bulk", limit=args.runs, progress=progressed)
    figures.seconds["bulk"] = time.perf_counter() - began
    _check(figures, "bulk", len(report.done), args.runs)

    began = time.perf_counter()
    done = 0
    for i in range(0, args.runs, args.batch):
        requeued, _refused = await bench.retry_many(ids["batches"][i:i + args.batch])
        done += len(requeued)
    figures.seconds["batches"] = time.perf_counter() - began
    _check(figures, "by id, in batches", done, args.runs)

    began = time.perf_counter()
    done = 0
    for i in range(0, args.runs, args.batch):
        batch = ids["gathered"][i:i + args.batch]
        done += len(await asyncio.gather(*(bench.retry(run_id) for run_id in batch)))
    figures.seconds["gathered"] = time.perf_counter() - began
    _check(figures, "by id, gathered", done, args.runs)

    first, second = await asyncio.gather(*(bench.bulk("retry", error="doomed-twice", limit=args.runs)
                                           for _ in range(2)))
    both = len(set(first.done) & set(second.done))
    figures.twice = (len(first.done), len(second.done), both)
    _check(figures, "two bulks at once", len(first.done) + len(second.done) - both, args.runs)
    for name in ("bulk", "batches", "gathered"):
        took = figures.seconds[name]
        say(figures.backend, f"{name}: {took:.2f} s, {args.runs / took:,.0f} runs/s")
    say(figures.backend, f"two bulks at once: {len(first.done)} + {len(second.done)} re-queued, "
                         f"{both} by both; refused {len(first.refused)} + {len(second.refused)}")


def _check(figures: Figures, what: str, done: int, want: int) -> None:
    if done != want:
        figures.notes.append(f"{what}: re-queued {done} of {want}")


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, 1, tmp, args.pg_url) as session:
        await session.bench.open()
        await measure(session.bench, args, figures)
    return figures


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    def secs(name: str):  # type: ignore[no-untyped-def]
        return lambda f: "-" if name not in f.seconds else f"{f.seconds[name]:.2f} s"

    def ratio(name: str):  # type: ignore[no-untyped-def]
        return lambda f: ("-" if not {"bulk", name} <= f.seconds.keys()
                          else f"{f.seconds['bulk'] / f.seconds[name]:.2f}x")

    rows = [
        ("bulk retry by error text", secs("bulk")),
        ("  progress calls", lambda f: str(f.progress_calls)),
        ("by id, retry_many in batches", secs("batches")),
        ("by id, gathered in batches", secs("gathered")),
        ("bulk / retry_many batches", ratio("batches")),
        ("bulk / gathered", ratio("gathered")),
        ("two bulks: first + second, both", lambda f: "-" if f.twice is None else
         f"{f.twice[0]} + {f.twice[1]}, {f.twice[2]}"),
    ]
    return common.render_table(f"runs {args.runs:,} a set, batch {args.batch}", rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS)
    common.run_main(common.bench_all(args, bench_backend, summary))
