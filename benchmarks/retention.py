"""Retention benchmark: does the database stay bounded under a steady load? A steady
stream of runs (each a step and some events) is submitted and drained by worker processes
that sweep (max age, max events), while the rows of each table are counted over time,
beside what the tables would hold without retention (every run submitted so far).

    cd /work/main && .venv/bin/python -m benchmarks.retention [--backends sqlite,postgres]
        [--runs 100000] [--rate 500] [--max-age-s 20] [--max-events 10]

It prints figures; it asserts nothing. The worker processes it starts import this module
(`benchmarks.retention:app`), so the module-level `app` and its tasks must stay importable
without side effects.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import redis.asyncio

import runwright as rw
from runwright.store._params import RunCountParams

from . import common
from .common import say

NAME = "retention"
SAMPLE_S = 5.0  # how often the tables are counted
TICK_S = 0.5  # the stream submits one batch per tick
SWEEP_INTERVAL_S = 2.0
BACKLOG_S = 2.0  # most seconds of the stream let wait queued
TABLES = ("runs", "steps", "events", "questions", "threads", "thread_messages", "thread_events", "reclaimed")

COUNTS = [
    common.Count("--runs", 100_000, "runs submitted in all", at_least=1),
    common.Count("--rate", 500, "runs submitted per second (a steady stream)", at_least=1),
    common.Count("--events", 20, "events each run emits (beside submitted, started, step, end)"),
    common.Count("--max-age-s", 20, "the workers' --retain-max-age-s", at_least=1),
    common.Count("--max-events", 10, "the workers' --retain-max-events", at_least=1),
    common.Count("--workers", 2, "worker processes (all sweep: one at a time holds the lease)", at_least=1),
    common.Count("--concurrency", 50, "slots per worker"),
]


async def chatty(ctx: rw.Context, events: int) -> int:
    await ctx.step("one", _one)
    for i in range(events):
        await ctx.emit("progress", {"i": i})
    return events


def _one() -> int:
    return 1


def with_tasks(target: rw.App) -> rw.App:
    target.task(chatty, retries=0)
    return target


# The app the worker processes load; they set RUNWRIGHT_URL before importing us.
app = with_tasks(rw.App())


@dataclass
class Sample:
    at_s: float  # since the stream began
    submitted: int
    ended: int
    queued: int
    rows: dict[str, int]


@dataclass
class Figures:
    backend: str
    samples: list[Sample] = field(default_factory=list)
    elapsed_s: float | None = None
    stream_s: float | None = None  # until the last run was submitted (first sample after)
    notes: list[str] = field(default_factory=list)


# -- counting rows ----------------------------------------------------------------------


async def count_rows(backend: str, url: str, schema: str, tmp: Path, pg_url: str) -> dict[str, int]:
    """Rows per table (SQL) or keys per kind (Redis: the part of the key before its id)."""
    if backend == "sqlite":
        return await asyncio.to_thread(_count_sqlite, tmp / "bench.db")
    if backend == "postgres":
        conn = await asyncpg.connect(pg_url)
        try:
            return {table: int(await conn.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))
                    for table in TABLES}
        finally:
            await conn.close()
    client = redis.asyncio.Redis.from_url(common.REDIS_URL)
    try:
        kinds: Counter[str] = Counter()
        async for key in client.scan_iter(match=f"*{{{schema}}}*", count=5000):
            tail = key.decode().rsplit("}", 1)[-1].lstrip(":")
            kinds[tail.split(":", 1)[0] + (":*" if ":" in tail else "")] += 1
        return dict(kinds)
    finally:
        await client.aclose()


def _count_sqlite(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}
    finally:
        conn.close()


# -- the stream -------------------------------------------------------------------------


async def stream(bench: rw.App, backend: str, url: str, schema: str, tmp: Path,
                 args: argparse.Namespace, figures: Figures) -> None:
    """Submit `--rate` runs a second until `--runs`, then wait for the last to end and one
    more max age for retention to catch up; count the tables every SAMPLE_S meanwhile.
    The stream holds back while more than BACKLOG_S seconds of it wait queued: a machine
    that drains slower than `--rate` gets a steady stream at the rate it drains, not a
    queue that grows (the queue is not what this benchmark measures)."""
    per_tick = max(1, round(args.rate * TICK_S))
    submitted = 0
    queued = 0
    t0 = time.perf_counter()
    next_sample = 0.0
    settle_until: float | None = None
    held_s = 0.0
    while True:
        now = time.perf_counter() - t0
        if submitted < args.runs and now - held_s >= submitted / args.rate:
            if queued > BACKLOG_S * args.rate:
                held_s += TICK_S  # backpressure: this tick's batch is not sent
            else:
                batch = min(per_tick, args.runs - submitted)
                await bench.submit_many("chatty", [{"events": args.events}] * batch)
                submitted += batch
                queued += batch
        if now >= next_sample or queued > BACKLOG_S * args.rate:
            counts = await bench.store.run_count_by_state(RunCountParams())
            queued = counts.get("queued", 0)
        if now >= next_sample:
            ended = sum(n for state, n in counts.items() if state not in ("queued", "running"))
            sample = Sample(now, submitted, ended, queued,
                            await count_rows(backend, url, schema, tmp, args.pg_url))
            figures.samples.append(sample)
            say(backend, line(sample))
            next_sample += SAMPLE_S
            if settle_until is None and submitted == args.runs and queued == 0 \
                    and counts.get("running", 0) == 0:
                settle_until = now + args.max_age_s + 2 * SWEEP_INTERVAL_S + SAMPLE_S
        if settle_until is not None and now >= settle_until:
            break
        await asyncio.sleep(0.01 if queued <= BACKLOG_S * args.rate else TICK_S)
    figures.elapsed_s = time.perf_counter() - t0
    figures.stream_s = next((s.at_s for s in figures.samples if s.submitted == args.runs), None)


def line(sample: Sample) -> str:
    rows = " ".join(f"{name}={count:,}" for name, count in sorted(sample.rows.items()) if count)
    return (f"t={sample.at_s:6.1f}s submitted={sample.submitted:,} ended={sample.ended:,} "
            f"queued={sample.queued:,} | {rows}")


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, args.concurrency, tmp,
                                      args.pg_url) as session:
        url = common.store_url(backend, tmp, args.pg_url, session.schema)
        await session.bench.open()
        session.workers.extra_args = [
            "--retain-max-age-s", str(args.max_age_s), "--retain-max-events", str(args.max_events),
            "--sweep-interval-s", str(SWEEP_INTERVAL_S)]
        session.workers.start(args.workers)
        await stream(session.bench, backend, url, session.schema, tmp, args, figures)
    return figures


# -- the summary ------------------------------------------------------------------------


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    """Per backend: the largest row counts once the first max age has passed (the tables
    should be flat from there on), at the end, and without retention (the baseline)."""
    lines = [f"retention: {args.runs:,} runs at {args.rate}/s, {args.events} events each, "
             f"max age {args.max_age_s} s, max events {args.max_events}, sweep every {SWEEP_INTERVAL_S} s"]
    for figures in all_figures:
        if not figures.samples:
            lines.append(f"[{figures.backend}] no samples")
            continue
        warm = args.max_age_s + 2 * SWEEP_INTERVAL_S
        steady = [s for s in figures.samples if s.at_s >= warm and s.submitted < args.runs] or figures.samples
        last = figures.samples[-1]
        events_each = 4 + args.events  # submitted, started, step, progress..., succeeded
        lines.append(f"[{figures.backend}] {len(figures.samples)} samples over {last.at_s:.0f} s")
        names = sorted({name for s in figures.samples for name in s.rows})
        width = max(len(n) for n in names) + 2
        lines.append("  " + "table".ljust(width) + "steady min".rjust(12) + "steady max".rjust(12)
                     + "at end".rjust(12))
        for name in names:
            values = [s.rows.get(name, 0) for s in steady]
            lines.append("  " + name.ljust(width) + f"{min(values):12,}{max(values):12,}"
                         f"{last.rows.get(name, 0):12,}")
        lines.append(f"  without retention: runs {last.submitted:,}, steps {last.submitted:,}, "
                     f"events {last.submitted * events_each:,}")
        if figures.stream_s:
            lines.append(f"  stream: {args.runs / figures.stream_s:,.0f} runs/s achieved "
                         f"over {figures.stream_s:.0f} s")
    lines += [f"note [{f.backend}]: {note}" for f in all_figures for note in f.notes]
    return "\n".join(lines)


async def main() -> None:
    args = common.parse_benchmark_args(__doc__ or "", COUNTS)
    await common.bench_all(args, bench_backend, summary)


if __name__ == "__main__":
    common.run_main(main())
