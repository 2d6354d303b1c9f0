"""Curves benchmark: does a worker's throughput hold as its concurrency grows, and does a
claim stay as fast as the backlog grows? Two curves per backend, each point beside the
curve's first point, measured in the same run.

    cd /work/main && .venv/bin/python -m benchmarks.curves [--backends postgres,redis]
        [--concurrencies 64,200,500] [--backlogs 10000,100000,1000000] [--runs 20000]

- Throughput by concurrency: for each `--concurrencies` value, a fresh store, `--runs`
  no-op runs submitted, then `--workers` worker processes of that concurrency drain them
  (the clock runs from the first claim to the last success). Printed with CPU µs per run
  (workers + database) and the ratio to the first point: a per-run cost that grows with
  the runs in flight shows as a falling ratio.
- Claim latency by backlog: for each `--backlogs` value, a fresh store holding that many
  queued runs; one registered worker then claims `--claims` times one run at a time, and
  a tenth as many times a batch of 100, and the p50/p99 of one claim call is printed with
  the ratio to the first backlog. A plan or a script that grows with the queue shows there.
  On PostgreSQL the filled tables are vacuumed and analysed first, as autovacuum would
  have by the time a real backlog is claimed.

It prints figures; it asserts nothing. The workers load `benchmarks.curves:app`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import asyncpg

import runwright as rw
from runwright.store._interface import Store
from runwright.store._params import RunClaimParams, RunCountParams, WorkerRegisterParams

from . import common
from .common import p99, say
from .cpu import CpuMeter
from .drain import meter_of, noop, wait_counts

NAME = "curves"
SUBMIT_CHUNK = 10_000  # runs per submit_many call while a backlog is filled
CLAIM_BATCH = 100

COUNTS = [
    common.Count("--runs", 20_000, "runs drained at each concurrency"),
    common.Count("--workers", 2, "worker processes of the throughput curve", at_least=1),
    common.Count("--claims", 200, "claims of one run timed at each backlog (a tenth as many of 100)",
                 at_least=20),
]


def with_tasks(target: rw.App) -> rw.App:
    target.task(noop)
    return target


# The app the worker processes load; they set RUNWRIGHT_URL before importing us.
app = with_tasks(rw.App())


@dataclass
class Point:
    x: int  # the concurrency, or the backlog
    per_s: float | None = None  # throughput (concurrency curve)
    cpu_us: tuple[float, float | None] | None = None
    one_ms: tuple[float, float] | None = None  # claim of 1: p50, p99 (backlog curve)
    batch_ms: tuple[float, float] | None = None  # claim of CLAIM_BATCH: p50, p99


@dataclass
class Figures:
    backend: str
    by_concurrency: list[Point] = field(default_factory=list)
    by_backlog: list[Point] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- the throughput curve -----------------------------------------------------------------


async def drain_at(backend: str, concurrency: int, args: argparse.Namespace, tmp: Path,
                   figures: Figures) -> None:
    point = Point(concurrency)
    figures.by_concurrency.append(point)
    place = tmp / f"c{concurrency}"
    place.mkdir()
    async with common.backend_session(figures, NAME, with_tasks, concurrency, place,
                                      args.pg_url) as session:
        bench = session.bench
        await bench.open()
        await bench.submit_many("noop", [{"n": i} for i in range(args.runs)])
        session.workers.start(args.workers)
        first = await wait_counts(bench, lambda c: c.get("queued", 0) < args.runs, "first claim")
        meter: CpuMeter = meter_of(backend, session.workers, args.pg_url, session.schema)
        await meter.start()
        done = await wait_counts(bench, lambda c: c.get("succeeded", 0) >= args.runs, "drain")
        point.cpu_us = await meter.per_run_us(args.runs)
        point.per_s = args.runs / (done - first)
    say(backend, f"concurrency {concurrency}: {rate(point.per_s)}, CPU per run "
                 f"{cpu(point.cpu_us)}")


# -- the claim-latency curve ----------------------------------------------------------------


async def claims_at(backend: str, backlog: int, args: argparse.Namespace, tmp: Path,
                    figures: Figures) -> None:
    point = Point(backlog)
    figures.by_backlog.append(point)
    place = tmp / f"b{backlog}"
    place.mkdir()
    async with common.backend_session(figures, NAME, with_tasks, 1, place, args.pg_url) as session:
        bench = session.bench
        await bench.open()
        began = time.perf_counter()
        for start in range(0, backlog, SUBMIT_CHUNK):
            chunk = range(start, min(backlog, start + SUBMIT_CHUNK))
            await bench.submit_many("noop", [{"n": i} for i in chunk])
        say(backend, f"backlog {backlog:,} submitted in {time.perf_counter() - began:.1f} s")
        if backend == "postgres":
            await settle(args.pg_url, session.schema)
        store = bench.store
        worker_id = await store.worker_register(WorkerRegisterParams(
            "bench", os.getpid(), ["default"], ["noop"]))
        point.one_ms = await time_claims(store, worker_id, 1, args.claims)
        point.batch_ms = await time_claims(store, worker_id, CLAIM_BATCH, batch_claims(args))
        counts = await store.run_count_by_state(RunCountParams())
        claimed, expected = counts.get("running", 0), claimed_in_all(args)
        if claimed != expected:
            figures.notes.append(f"backlog {backlog}: {claimed} runs claimed, expected {expected}")
    say(backend, f"backlog {backlog:,}: claim of 1 p50/p99 {ms(point.one_ms)}, "
                 f"of {CLAIM_BATCH} {ms(point.batch_ms)}")


async def settle(dsn: str, schema: str) -> None:
    """VACUUM ANALYZE the freshly filled tables: a backlog that has waited has been through
    autovacuum, whose pass would otherwise run during the timed claims (on a million new
    rows, for seconds) and time that instead of the claim."""
    conn = await asyncpg.connect(dsn)
    try:
        for table in ("runs", "events"):
            await conn.execute(f'VACUUM (ANALYZE) "{schema}".{table}')
    finally:
        await conn.close()


def batch_claims(args: argparse.Namespace) -> int:
    """Claims of CLAIM_BATCH timed per backlog: a tenth as many as claims of one, so that
    the two take about the same share of the smallest backlog."""
    return max(2, args.claims // 10)


def claimed_in_all(args: argparse.Namespace) -> int:
    return args.claims + CLAIM_BATCH * batch_claims(args)


async def time_claims(store: Store, worker_id: int, limit: int, claims: int) -> tuple[float, float]:
    """p50 and p99 in ms of `claims` claim calls of `limit` runs each (the runs stay
    claimed: the backlog shrinks by a negligible share)."""
    took = []
    params = RunClaimParams(worker_id, ["default"], ["noop"], limit, 300.0)
    for _ in range(claims):
        t0 = time.perf_counter()
        runs = await store.run_claim(params)
        took.append((time.perf_counter() - t0) * 1000)
        if len(runs) != limit:
            raise common.BenchError(f"a claim of {limit} got {len(runs)} runs")
    return statistics.median(took), p99(took)


# -- one backend, start to end ------------------------------------------------------------


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    place = tmp / backend
    place.mkdir()
    for concurrency in args.concurrencies:
        await drain_at(backend, concurrency, args, place, figures)
    for backlog in args.backlogs:
        await claims_at(backend, backlog, args, place, figures)
    return figures


# -- report ---------------------------------------------------------------------------------


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def cpu(us: tuple[float, float | None] | None) -> str:
    if us is None:
        return "-"
    workers, database = us
    return f"{workers:.0f} µs" if database is None else f"{workers:.0f} + {database:.0f} µs"


def ms(values: tuple[float, float] | None) -> str:
    return "-" if values is None else f"{values[0]:.2f} / {values[1]:.2f} ms"


def ratio(value: float | None, first: float | None) -> str:
    return "-" if value is None or not first else f"{value / first:.2f}x"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows: list[tuple[str, Callable[[Figures], str]]] = []
    for i, concurrency in enumerate(args.concurrencies):
        def at(f: Figures, i: int = i) -> Point:
            return f.by_concurrency[i] if i < len(f.by_concurrency) else Point(0)

        rows += [(f"drain, concurrency {concurrency}", lambda f, at=at: rate(at(f).per_s)),
                 ("  CPU per run (workers + db)", lambda f, at=at: cpu(at(f).cpu_us)),
                 ("  vs the first concurrency", lambda f, at=at: ratio(at(f).per_s, at(f, 0).per_s))]
    for i, backlog in enumerate(args.backlogs):
        def on(f: Figures, i: int = i) -> Point:
            return f.by_backlog[i] if i < len(f.by_backlog) else Point(0)

        rows += [(f"claim of 1, backlog {backlog:,}", lambda f, on=on: ms(on(f).one_ms)),
                 ("  p50 vs the first backlog",
                  lambda f, on=on: ratio(p50(on(f).one_ms), p50(on(f, 0).one_ms))),
                 (f"claim of {CLAIM_BATCH}, backlog {backlog:,}", lambda f, on=on: ms(on(f).batch_ms)),
                 ("  p50 vs the first backlog",
                  lambda f, on=on: ratio(p50(on(f).batch_ms), p50(on(f, 0).batch_ms)))]
    header = (f"runs {args.runs:,} per concurrency, workers {args.workers}; "
              f"{args.claims} claims per backlog and size")
    return common.render_table(header, rows, all_figures)


def p50(values: tuple[float, float] | None) -> float | None:
    return None if values is None else values[0]


def parse_args() -> argparse.Namespace:
    args = common.parse_benchmark_args(__doc__, COUNTS, extra=[
        ("--concurrencies", "64,200,500", "slots per worker, one drain each"),
        ("--backlogs", "10000,100000,1000000", "queued runs, one store each"),
    ])
    args.concurrencies = [int(v) for v in args.concurrencies.split(",")]
    args.backlogs = [int(v) for v in args.backlogs.split(",")]
    if min(args.backlogs) < 2 * claimed_in_all(args):
        raise SystemExit(f"--backlogs: each must be at least {2 * claimed_in_all(args):,}, twice the "
                         f"runs the timed claims take ({args.claims} of 1, {batch_claims(args)} of "
                         f"{CLAIM_BATCH}), so the queue stays mostly full")
    return args


if __name__ == "__main__":
    common.run_main(common.bench_all(parse_args(), bench_backend, summary))
