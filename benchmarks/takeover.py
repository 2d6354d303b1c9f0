"""Takeover benchmark: how long PostgreSQL takes to give a SIGKILLed worker's run to another
worker, and what cut sessions (a blip) cost, on worker processes.

    cd /work/main && .venv/bin/python -m benchmarks.takeover [--kills 20] [--blips 20]

Kills: two workers; a long run starts on one of them, which is SIGKILLed (and reaped, as a
supervisor would); the takeover is the time from the kill to the run's next `started`
event, both read on the database's clock. Each kill waits a random 1.5-2.5 s after the
workers are up, so that it lands at a random point of the survivor's poll and its watch
has chosen whom to watch. Blips: every session of the worker that runs a long run is cut
(`pg_terminate_backend`, as a restarted database or a proxy would) --blips times; the
worker lives on, so a takeover (the run's fence moving) is a fault: their count must be 0.
Beside it, how long the worker's liveness mark stayed missing after each cut (the grace a
rescuer gives a worker that might come back must outlast it). It prints figures; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

import runwright as rw
from runwright.store._params import EventListParams

from . import common
from .common import BenchError, Workers, p99, say

NAME = "takeover"  # the workers load benchmarks.takeover:app
POLL_S = 0.005
LONG_S = 600.0  # the long run outlives every measurement (cancelled at the end)
BLIP_GAP_S = (0.6, 1.2)  # between two cuts: the mark is back well before the next

COUNTS = [
    common.Count("--kills", 20, "SIGKILLs timed (p50 and p99 printed)", at_least=2),
    common.Count("--blips", 20, "cuts of every session of a worker running a run", at_least=1),
]


async def long_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def with_tasks(target: rw.App) -> rw.App:
    target.task(long_sleep)
    return target


app = with_tasks(rw.App())  # the workers set RUNWRIGHT_URL before importing us


@dataclass
class Figures:
    backend: str = "postgres"
    takeovers_s: list[float] = field(default_factory=list)
    blip_takeovers: int | None = None
    mark_back_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def running_on_some_worker(bench: rw.App) -> tuple[rw.Run, int]:
    """Submit a long run; once it runs: the run and its worker's pid."""
    handle = await bench.submit("long_sleep", seconds=LONG_S)
    deadline = time.monotonic() + 30
    while True:
        run = await bench.store.run_get(handle.id)
        if run is not None and run.state is rw.RunState.RUNNING and run.owner is not None:
            owners = {w.id: w.pid for w in await bench.store.worker_list()}
            if run.owner in owners:
                return run, owners[run.owner]
        if time.monotonic() > deadline:
            raise BenchError(f"the long run did not start: {run}")
        await asyncio.sleep(POLL_S)


async def wait_workers(bench: rw.App, workers: Workers) -> None:
    """Until exactly our live workers are registered (a dead one is removed by rescue)."""
    wanted = {proc.pid for proc in workers.procs}
    deadline = time.monotonic() + 30
    while {w.pid for w in await bench.store.worker_list()} != wanted:
        if time.monotonic() > deadline:
            raise BenchError(f"workers {sorted(wanted)} did not register")
        await asyncio.sleep(0.02)


async def restarted_at(bench: rw.App, run: rw.Run) -> float:
    """The database's time of the run's next `started` event (another worker took it)."""
    deadline = time.monotonic() + 30
    while True:
        now = await bench.store.run_get(run.id)
        if now is not None and now.fence > run.fence and now.state is rw.RunState.RUNNING:
            events = await bench.store.event_list(EventListParams(run.id))
            return [e.at for e in events if e.kind == "started"][-1]
        if time.monotonic() > deadline:
            raise BenchError(f"run {run.id} was not taken over in 30 s: {now}")
        await asyncio.sleep(POLL_S)


async def measure_kills(bench: rw.App, workers: Workers, admin: asyncpg.Connection, kills: int,
                        figures: Figures) -> None:
    for _ in range(kills):
        workers.start(2 - len(workers.procs))
        await wait_workers(bench, workers)
        await asyncio.sleep(random.uniform(1.5, 2.5))
        run, pid = await running_on_some_worker(bench)
        killed_at = float(await admin.fetchval("SELECT extract(epoch FROM clock_timestamp())"))
        workers.kill(workers.by_pid(pid))
        figures.takeovers_s.append(await restarted_at(bench, run) - killed_at)
        await bench.cancel(run.id)
    taken = figures.takeovers_s
    say("postgres", f"takeover after SIGKILL over {len(taken)} kills: p50 "
                    f"{statistics.median(taken):.3f} s, p99 {p99(taken):.3f} s, max {max(taken):.3f} s")


async def measure_blips(bench: rw.App, workers: Workers, admin: asyncpg.Connection, schema: str,
                        blips: int, figures: Figures) -> None:
    workers.start(2 - len(workers.procs))
    await wait_workers(bench, workers)
    await asyncio.sleep(2.0)
    run, pid = await running_on_some_worker(bench)
    worker_id = run.owner
    namespace = bench.store.lock_namespace  # type: ignore[attr-defined]
    for _ in range(blips):
        await asyncio.sleep(random.uniform(*BLIP_GAP_S))
        cut = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            f"runwright:{schema}:{pid}")
        began = time.monotonic()
        if not cut:
            raise BenchError(f"no session of worker {pid} to cut")
        while not await admin.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid"
                " AND objid::bigint = $2 AND objsubid = 2 AND granted", namespace, worker_id):
            if time.monotonic() - began > 30:
                raise BenchError("the worker did not take its mark again in 30 s")
            await asyncio.sleep(0.002)
        figures.mark_back_s.append(time.monotonic() - began)
    await asyncio.sleep(2.0)  # past every rescuer's grace and poll
    after = await bench.store.run_get(run.id)
    assert after is not None
    figures.blip_takeovers = after.fence - run.fence
    back = figures.mark_back_s
    say("postgres", f"{blips} blips: {figures.blip_takeovers} takeovers; the mark was missing "
                    f"p50 {statistics.median(back) * 1000:.0f} ms, max {max(back) * 1000:.0f} ms")
    await bench.cancel(run.id)


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, 4, tmp, args.pg_url) as session:
        await session.bench.open()
        admin = await asyncpg.connect(args.pg_url)
        try:
            await measure_kills(session.bench, session.workers, admin, args.kills, figures)
            await measure_blips(session.bench, session.workers, admin, session.schema, args.blips,
                                figures)
        finally:
            await admin.close()
    return figures


def seconds(values: list[float], pick: str) -> str:
    if not values:
        return "-"
    return f"{(statistics.median(values) if pick == 'p50' else p99(values)):.3f} s"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("takeover after SIGKILL, p50", lambda f: seconds(f.takeovers_s, "p50")),
        ("takeover after SIGKILL, p99", lambda f: seconds(f.takeovers_s, "p99")),
        (f"takeovers in {args.blips} blips", lambda f: "-" if f.blip_takeovers is None
         else str(f.blip_takeovers)),
        ("mark missing after a cut, max", lambda f: f"{max(f.mark_back_s) * 1000:.0f} ms"
         if f.mark_back_s else "-"),
    ]
    return common.render_table(f"kills {args.kills}", rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS, backends=False)
    common.run_main(common.bench_all(args, bench_backend, summary))
