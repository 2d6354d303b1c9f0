"""Signals benchmark: how soon a run parked on `ctx.wait_signal` wakes when a signal is sent
from another process, beside how soon an event a run emits reaches a follower in another
process, on each backend, in one run; and how many signals per second go into one run.

    cd /work/main && .venv/bin/python -m benchmarks.signals [--backends sqlite,postgres,redis]
        [--signals 100] [--burst 500] [--pg-url URL]

It prints figures; it asserts nothing. One worker process (`runwright worker
benchmarks.signals:app`, 4 slots) runs `ping_pong`, which waits for a signal, emits a `pong`
event stamped with the time it woke, and waits again (so each signal finds the run parked:
the wake includes the park, the send's wake-up, the claim and the replay):

- **signal to wake**: from just before `run.signal(...)` in this process to the worker's
  stamp when `ctx.wait_signal` returned: p50 / p99 over `--signals` round trips (the first
  few, warming the caches, not counted).
- **event to follower**: the same `pong` events, from the worker's stamp (taken just before
  `ctx.emit`) to their arrival through `run.events()` in this process: the cross-process
  follow latency the issue compares with (goal: signal to wake within 2x of it).
- **sends into one run**: `--burst` signals sent one after another by this process to one
  run that does not read them: sends per second (each is one fenced write).
- **taken by one run**: the same burst read by `gather_signals` (a run of a queue no worker
  served while the signals went in; then one does), from its start to its end (the
  store's `started_at`/`finished_at`): signals taken per second, each one fenced write and
  one journal entry.
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
from .common import num, p99, say

NAME = "signals"
WARMUP = 5
RUN_TIMEOUT_S = 120.0
BURST_QUEUE = "burst"
COUNTS = [common.Count("--signals", 100, "ping-pong round trips timed", at_least=WARMUP + 2),
          common.Count("--burst", 500, "signals sent into one run, then taken by it", at_least=2)]

app = rw.App()  # the store of the command line's --url (RUNWRIGHT_URL), as common.Workers starts it


@app.task()
async def ping_pong(ctx: rw.Context, rounds: int) -> int:
    for i in range(rounds):
        await ctx.wait_signal("ping")
        woke = time.time()
        await ctx.emit("pong", {"i": i, "woke": woke, "emitted": time.time()})
    return rounds


@app.task()
async def gather_signals(ctx: rw.Context, count: int) -> int:
    taken = 0
    async for _ in ctx.signals("burst"):
        taken += 1
        if taken == count:
            break
    return taken


@dataclass
class Figures:
    backend: str
    wake_ms: tuple[float, float] | None = None
    follow_ms: tuple[float, float] | None = None
    sends_per_s: float | None = None
    takes_per_s: float | None = None
    notes: list[str] = field(default_factory=list)


def _tasks(bench: rw.App) -> rw.App:
    bench.tasks.update(app.tasks)
    return bench


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, _tasks, 4, tmp, args.pg_url) as session:
        bench = session.bench
        await bench.open()
        session.workers.start(1)
        run = await bench.submit(ping_pong, rounds=args.signals)
        events = run.events()
        wakes, follows = [], []
        for i in range(args.signals):
            sent = time.time()
            await run.signal("ping", i)
            event = await asyncio.wait_for(_next_pong(events), RUN_TIMEOUT_S)
            arrived = time.time()
            if i >= WARMUP:
                wakes.append((event.data["woke"] - sent) * 1000)
                follows.append((arrived - event.data["emitted"]) * 1000)
        figures.wake_ms = (statistics.median(wakes), p99(wakes))
        figures.follow_ms = (statistics.median(follows), p99(follows))
        say(backend, f"signal to wake p50 {figures.wake_ms[0]:.2f} ms p99 {figures.wake_ms[1]:.2f} ms; "
                     f"event to follower p50 {figures.follow_ms[0]:.2f} ms p99 {figures.follow_ms[1]:.2f} ms")
        await run.result(timeout_s=RUN_TIMEOUT_S)

        # The burst goes to a run of a queue no worker serves yet, so that it reads nothing
        # while the signals go in; then a worker of that queue takes them all.
        burst = await bench.submit(gather_signals, count=args.burst, queue=BURST_QUEUE)
        began = time.perf_counter()
        for i in range(args.burst):
            await burst.signal("burst", i)
        figures.sends_per_s = args.burst / (time.perf_counter() - began)
        session.workers.extra_args = ["--queues", BURST_QUEUE]
        session.workers.start(1)
        await burst.result(timeout_s=RUN_TIMEOUT_S)
        done = await burst.refresh()
        assert done.started_at is not None and done.finished_at is not None
        figures.takes_per_s = args.burst / (done.finished_at - done.started_at)
        say(backend, f"{figures.sends_per_s:,.0f} sends/s into one run; {figures.takes_per_s:,.0f} taken/s")
    return figures


async def _next_pong(events) -> rw.Event:  # type: ignore[no-untyped-def]
    async for event in events:
        if event.kind == "pong":
            return event
    raise common.BenchError("the run ended before its pong")


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("signal to wake, p50 / p99", lambda f: common.pair(f.wake_ms, "ms")),
        ("event to follower, p50 / p99", lambda f: common.pair(f.follow_ms, "ms")),
        ("wake / follow, p50", lambda f: "-" if not (f.wake_ms and f.follow_ms)
         else f"{f.wake_ms[0] / f.follow_ms[0]:.2f}x"),
        ("sends into one run", lambda f: num(f.sends_per_s, "/s")),
        ("taken by one run", lambda f: num(f.takes_per_s, "/s")),
    ]
    return common.render_table(f"signals: {args.signals} round trips, bursts of {args.burst}", rows,
                               all_figures)


async def main() -> None:
    args = common.parse_benchmark_args(__doc__ or "", COUNTS)
    await common.bench_all(args, bench_backend, summary)


if __name__ == "__main__":
    common.run_main(main())
