"""Resume benchmark: how long a long run takes to resume, replaying its whole journal
or only what followed its last snapshot, on each backend.

    cd /work/main && .venv/bin/python -m benchmarks.resume [--backends sqlite,postgres]

A run journals --steps no-op steps, then parks for a moment (a durable sleep); the
resumed attempt replays and ends. Its time, from its `started` event to its end as the
store recorded them, is the resume: once with no snapshot (the whole journal replayed),
once with a snapshot every --snapshot-every steps and `ctx.restore()`. It prints figures;
it asserts nothing. The worker it runs is in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import runwright as rw
from runwright.store._params import EventListParams

from . import common
from .common import num, say

NAME = "resume"
ROUNDS = 3  # resumes timed per variant; the median is printed
PARK_S = 0.2  # the durable sleep after the steps: long enough to park, not to wait
RUN_TIMEOUT_S = 600.0

COUNTS = [
    common.Count("--steps", 5000, "journaled steps before the park", at_least=1),
    common.Count("--snapshot-every", 100, "steps between snapshots in the snapshotting variant",
                 at_least=1),
]


def nothing(i: int) -> int:
    return i


async def long_run(ctx: rw.Context, steps: int, snapshot_every: int) -> int:
    """`steps` steps summed, parked once at the end; snapshot_every 0: no snapshot."""
    state = (await ctx.restore() if snapshot_every else None) or {"i": 0, "total": 0}
    while state["i"] < steps:
        state["total"] += await ctx.step("add", nothing, state["i"])
        state["i"] += 1
        if snapshot_every and state["i"] % snapshot_every == 0:
            await ctx.snapshot(state)
    await ctx.sleep(PARK_S)
    return int(state["total"])


def with_tasks(target: rw.App) -> rw.App:
    target.task(long_run)
    return target


app = with_tasks(rw.App())


@dataclass
class Figures:
    backend: str
    full_ms: float | None = None  # resume replaying the whole journal
    snapshot_ms: float | None = None  # resume from the last snapshot
    notes: list[str] = field(default_factory=list)


async def resume_ms(bench: rw.App, steps: int, snapshot_every: int) -> float:
    handle = await bench.submit("long_run", steps=steps, snapshot_every=snapshot_every)
    run = await asyncio.wait_for(bench.wait_done(handle.id), RUN_TIMEOUT_S)
    if run.state is not rw.RunState.SUCCEEDED:
        raise common.BenchError(f"the run ended {run.state.value}: {run.error}")
    events = await bench.store.event_list(EventListParams(handle.id, 0, 10_000_000))
    resumed = [e.at for e in events if e.kind == "started"][-1]
    assert run.finished_at is not None
    return (run.finished_at - resumed) * 1000


async def measure(bench: rw.App, args: argparse.Namespace, figures: Figures) -> None:
    worker = bench.worker(concurrency=4)
    running = asyncio.create_task(worker.run())
    try:
        for every, attr in ((0, "full_ms"), (args.snapshot_every, "snapshot_ms")):
            times = [await resume_ms(bench, args.steps, every) for _ in range(ROUNDS)]
            setattr(figures, attr, statistics.median(times))
            what = "whole journal" if not every else f"snapshot every {every} steps"
            say(figures.backend, f"resume of a {args.steps:,}-step run, {what}: "
                                 f"{statistics.median(times):,.1f} ms (median of {ROUNDS})")
    finally:
        worker.stop()
        await running


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, 4, tmp, args.pg_url) as session:
        await session.bench.open()
        await measure(session.bench, args, figures)
    return figures


def speedup(f: Figures) -> str:
    return "-" if not f.full_ms or not f.snapshot_ms else f"{f.full_ms / f.snapshot_ms:.1f}x"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("resume, whole journal", lambda f: num(f.full_ms, "ms")),
        (f"resume, snapshot every {args.snapshot_every}", lambda f: num(f.snapshot_ms, "ms")),
        ("  faster by", speedup),
    ]
    return common.render_table(f"steps {args.steps:,}", rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS)
    common.run_main(common.bench_all(args, bench_backend, summary))
