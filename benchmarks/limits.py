"""Concurrency limits per key: what a declared limit costs a drain, and whether a big
tenant's backlog delays a small tenant's runs (fairness), per backend, in one run.

    cd /work/main && .venv/bin/python -m benchmarks.limits [--backends sqlite,postgres,redis]
        [--runs 10000] [--workers 2] [--concurrency 200] [--rounds 3] [--keys 1000]
        [--backlog 20000] [--probes 20] [--before TREE]

It prints figures; it asserts nothing. Per backend, `--rounds` rounds of three drains of
`--runs` pre-submitted no-op runs by `--workers` processes (started once the batch is in,
timed from the first claim to the last success, as drain.py's), the medians beside the
first's:
- no limit: the workers' app declares no limit at all (`benchmarks.limits:plain`), as today;
- limit, every key with room: a task limited per key (max 2), each run under a key of its
  own, so the limit never holds a run back: the cost of the limited claim path alone;
- 1,000 keys x 2: the same task, the runs spread over `--keys` keys (max 2 each).
Then fairness: a task limited per tenant (max 4, runs of 2 ms); a small tenant submits
`--probes` runs one at a time (each submitted once the one before started), alone, then
again while a big tenant's `--backlog` runs wait behind its full key. The start latency
(the store's started_at - created_at) p50/p99 of each, and their ratio.

`--before TREE`: a source tree of an older commit (`git archive <commit> | tar -x -C TREE`),
whose no-op drain (its own `benchmarks.drain:app`, its own store schema) is run by a
script in a process of that tree and of this one, alternately, `--rounds` times each:
the no-limit drain of today beside the one before the limits landed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import runwright as rw
from runwright.store._params import RunCountParams

from . import common
from .common import BenchError, Workers, p99, say
from .drain import succeeded, wait_counts

NAME = "limits"
TENANT_MAX = 4
FAIR_RUN_S = 0.002  # a fairness run's length: the big tenant's slots stay busy
PROBE_TIMEOUT_S = 120.0  # a small tenant's run not started by then is reported, not awaited
DRAINS = ("plain", "roomy", "keyed")

COUNTS = [
    common.Count("--runs", 10_000, "runs per drained batch", at_least=1),
    common.Count("--workers", 2, "worker processes", at_least=1),
    common.Count("--concurrency", 200, "slots per worker", at_least=1),
    common.Count("--rounds", 3, "drains of each kind (medians printed)", at_least=1),
    common.Count("--keys", 1000, "keys of the 1,000 keys x 2 drain", at_least=1),
    common.Count("--backlog", 20_000, "the big tenant's queued runs", at_least=1),
    common.Count("--probes", 20, "the small tenant's runs, one at a time", at_least=2,
                 why="a percentile needs two values"),
]


async def noop(n: int) -> None:
    return None


async def keyed(n: int, k: str) -> None:
    return None


async def fair(n: int) -> None:
    await asyncio.sleep(FAIR_RUN_S)


def plain_tasks(target: rw.App) -> rw.App:
    target.task(noop)
    return target


def with_tasks(target: rw.App) -> rw.App:
    plain_tasks(target)
    target.task(concurrency=rw.Limit(key="{args.k}", max=2, name="per-key"))(keyed)
    target.task(concurrency=rw.Limit(key="{tenant}", max=TENANT_MAX, name="per-tenant"))(fair)
    return target


# The apps the worker processes load; they set RUNWRIGHT_URL before importing us.
app = with_tasks(rw.App())
plain = plain_tasks(rw.App())  # no limit declared anywhere: today's drain


@dataclass
class Figures:
    backend: str
    drains: dict[str, list[float]] = field(default_factory=dict)  # runs/s of each round
    alone_ms: list[float] = field(default_factory=list)
    behind_ms: list[float] = field(default_factory=list)
    left: int | None = None  # the big tenant's runs still queued after the probes
    notes: list[str] = field(default_factory=list)

    def median(self, kind: str) -> float | None:
        rounds = self.drains.get(kind)
        return statistics.median(rounds) if rounds else None


async def drain(bench: rw.App, workers: Workers, args: argparse.Namespace, backend: str,
                task: str, items: list[dict[str, object]]) -> float:
    """One pre-submitted batch drained by workers started afterwards: runs per second from
    the first claim to the last success."""
    workers.stop_all()
    before = succeeded(await bench.store.run_count_by_state(RunCountParams()))
    await bench.submit_many(task, items)
    workers.start(args.workers)
    first = await wait_counts(bench, lambda c: c.get("queued", 0) < len(items), "first claim")
    done = await wait_counts(bench, lambda c: succeeded(c) >= before + len(items), f"{task} drain")
    return len(items) / (done - first)


async def measure_drains(bench: rw.App, plain_workers: Workers, workers: Workers,
                         args: argparse.Namespace, figures: Figures) -> None:
    """Rounds of the three drains, interleaved, so that the machine's other load falls on
    each alike."""
    batches = {
        "plain": ("noop", [{"n": i} for i in range(args.runs)], plain_workers),
        "roomy": ("keyed", [{"n": i, "k": f"r{i}"} for i in range(args.runs)], workers),
        "keyed": ("keyed", [{"n": i, "k": f"k{i % args.keys}"} for i in range(args.runs)], workers),
    }
    for _ in range(args.rounds):
        for kind, (task, items, by) in batches.items():
            rate = await drain(bench, by, args, figures.backend, task, items)
            figures.drains.setdefault(kind, []).append(rate)
            say(figures.backend, f"{kind} drain: {rate:,.0f} runs/s")
    plain_workers.stop_all()
    workers.stop_all()


async def probe(bench: rw.App, args: argparse.Namespace) -> list[float]:
    """The small tenant's start latency, ms, one run at a time (its key never full)."""
    out = []
    for i in range(args.probes):
        handle = await bench.submit("fair", n=i, tenant="small")
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


async def measure_fairness(bench: rw.App, workers: Workers, args: argparse.Namespace,
                           figures: Figures) -> None:
    workers.stop_all()
    workers.start(args.workers)
    await probe(bench, args)  # warm-up: the workers' first claims, listeners, caches
    figures.alone_ms = await probe(bench, args)
    say(figures.backend, f"small tenant alone: start p50 {statistics.median(figures.alone_ms):.1f} ms "
                         f"p99 {p99(figures.alone_ms):.1f} ms")
    for start in range(0, args.backlog, 5000):
        await bench.submit_many("fair", [{"n": i} for i in range(start, min(start + 5000, args.backlog))],
                                tenant="big")
    deadline = time.perf_counter() + 60
    while (await bench.store.run_count_by_state(RunCountParams(tenant="big"))).get("running", 0) < TENANT_MAX:
        if time.perf_counter() > deadline:
            raise BenchError("the big tenant's key never filled")
        await asyncio.sleep(0.01)
    figures.behind_ms = await probe(bench, args)
    figures.left = (await bench.store.run_count_by_state(RunCountParams(tenant="big"))).get("queued", 0)
    say(figures.backend, f"small tenant behind {args.backlog:,} of the big one's: start p50 "
                         f"{statistics.median(figures.behind_ms):.1f} ms p99 {p99(figures.behind_ms):.1f} ms "
                         f"({figures.left:,} of the big tenant's still queued)")
    workers.stop_all()


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, args.concurrency, tmp,
                                      args.pg_url) as session:
        await session.bench.open()
        plain_logs = tmp / f"logs-{backend}-plain"
        plain_logs.mkdir()
        plain_workers = Workers(f"benchmarks.{NAME}:plain", session.workers.url, args.concurrency, plain_logs)
        try:
            await measure_drains(session.bench, plain_workers, session.workers, args, figures)
        finally:
            plain_workers.stop_all()
            figures.notes.extend(plain_workers.log_problems())
        await measure_fairness(session.bench, session.workers, args, figures)
    return figures


# -- the drain of an older tree beside today's --------------------------------------------

# Run with a tree's own src and benchmarks (cwd): submit a batch of its drain app's noop,
# start its workers, time from the first claim to the last success; print runs/s.
BEFORE_SCRIPT = """
import asyncio, subprocess, sys, time
import runwright as rw
from runwright.store._params import RunCountParams
from benchmarks.drain import with_tasks

async def main(url, runs, workers, concurrency):
    async with with_tasks(rw.App(url)) as app:
        await app.submit_many("noop", [{"n": i} for i in range(runs)])
        procs = [subprocess.Popen([sys.executable, "-m", "runwright", "worker", "benchmarks.drain:app",
                                   "--concurrency", str(concurrency), "--url", url],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(workers)]
        try:
            first = done = None
            deadline = time.perf_counter() + 300
            while done is None and time.perf_counter() < deadline:
                counts = await app.store.run_count_by_state(RunCountParams())
                now = time.perf_counter()
                if first is None and counts.get("queued", 0) < runs:
                    first = now
                if counts.get("succeeded", 0) >= runs:
                    done = now
                await asyncio.sleep(0.02)
            print(runs / (done - first))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
"""


async def measure_before(tree: Path, backend: str, args: argparse.Namespace, tmp: Path,
                         figures: Figures) -> None:
    """`--rounds` drains of that tree and of this one, alternately, each on a fresh store."""
    for n in range(args.rounds):
        for label, root in (("before", tree), ("today", common.ROOT)):
            schema = f"bench_{NAME}_{label}_{os.getpid()}_{n}"
            where = tmp / f"{backend}-{label}-{n}"
            where.mkdir()
            url = common.store_url(backend, where, args.pg_url, schema)
            env = {**os.environ, "PYTHONPATH": str(root / "src"), "RUNWRIGHT_LOG_LEVEL": "WARNING"}
            try:
                done = await asyncio.to_thread(
                    subprocess.run, [sys.executable, "-c", BEFORE_SCRIPT, url, str(args.runs),
                                     str(args.workers), str(args.concurrency)],
                    cwd=root, env=env, capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    figures.notes.append(f"{label} drain failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                rate = float(done.stdout.split()[-1])
                figures.drains.setdefault(label, []).append(rate)
                say(backend, f"{label} drain ({root}): {rate:,.0f} runs/s")
            finally:
                if backend == "postgres":
                    await common.drop_schema(args.pg_url, schema, figures.notes)
                elif backend == "redis":
                    await common.drop_namespace(schema, figures.notes)


async def bench_with_before(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = await bench_backend(backend, args, tmp)
    if args.before:
        try:
            await measure_before(Path(args.before).resolve(), backend, args, tmp, figures)
        except (BenchError, OSError, subprocess.SubprocessError) as exc:
            figures.notes.append(f"before/today drains stopped: {exc}")
    return figures


# -- report -----------------------------------------------------------------------------


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    def rate(kind: str):  # type: ignore[no-untyped-def]
        def cell(f: Figures) -> str:
            rounds = f.drains.get(kind)
            if not rounds:
                return "-"
            return f"{statistics.median(rounds):,.0f}/s ({min(rounds):,.0f}-{max(rounds):,.0f})"
        return cell

    def ratio(kind: str, base: str):  # type: ignore[no-untyped-def]
        def cell(f: Figures) -> str:
            top, bottom = f.median(kind), f.median(base)
            return "-" if top is None or bottom is None else f"{bottom / top:.2f}x"
        return cell

    def latency(which: str):  # type: ignore[no-untyped-def]
        def cell(f: Figures) -> str:
            values = getattr(f, which)
            return "-" if not values else f"{statistics.median(values):.1f} / {p99(values):.1f} ms"
        return cell

    def fairness(f: Figures) -> str:
        if not f.alone_ms or not f.behind_ms:
            return "-"
        return (f"{statistics.median(f.behind_ms) / statistics.median(f.alone_ms):.2f}x / "
                f"{p99(f.behind_ms) / p99(f.alone_ms):.2f}x")

    rows = [
        ("drain, no limit declared", rate("plain")),
        ("drain, limit, every key with room", rate("roomy")),
        ("  time vs no limit", ratio("roomy", "plain")),
        (f"drain, {args.keys:,} keys x 2", rate("keyed")),
        ("  time vs no limit", ratio("keyed", "plain")),
        ("small tenant alone p50 / p99", latency("alone_ms")),
        (f"behind {args.backlog:,} of a big one", latency("behind_ms")),
        ("  ratio p50 / p99 (goal < 2x)", fairness),
        ("  big tenant's still queued", lambda f: "-" if f.left is None else f"{f.left:,}"),
    ]
    if args.before:
        rows += [
            ("no-op drain, --before tree", rate("before")),
            ("no-op drain, this tree", rate("today")),
            ("  time today vs before", ratio("today", "before")),
        ]
    header = (f"runs {args.runs:,}, {args.workers} workers x {args.concurrency}, {args.rounds} rounds "
              f"(median, slowest-fastest); fairness: max {TENANT_MAX} per tenant, {args.probes} probes")
    return common.render_table(header, rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS, extra=[
        ("--before", "", "a source tree of an older commit: its no-op drain beside today's")])
    common.run_main(common.bench_all(args, bench_with_before, summary))
