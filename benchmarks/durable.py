"""Durable-execution benchmark: what a journaled step, an emitted event and a followed
event cost on each backend, next to the bare SQL and the bare store call under them.

    cd /work/main && .venv/bin/python -m benchmarks.durable [--backends sqlite,postgres]

It prints figures; it asserts nothing. The worker processes it starts import this module
(`benchmarks.durable:app`), so the module-level `app` and its tasks must stay importable
without side effects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import sqlite3
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import asyncpg
import redis.asyncio

import runwright as rw
from runwright.store._params import EventAppendParams, RunClaimParams, RunFinishParams, WorkerRegisterParams

from . import common
from .common import BenchError, ProblemLog, Workers, event_loop_runner, num, p99, pair, say

NAME = "durable"  # the workers load benchmarks.durable:app; PostgreSQL's schema is bench_durable_<pid>
ROUNDS = 5  # timed runs (and bare-SQL rounds) whose median gives the cost of a step
RATE_ROUNDS = 3  # timed runs whose median gives an append rate
FOLLOW_INTERVAL_S = 0.005  # spacing of the followed events
FOLLOW_WARMUP = 5  # first followed events warm the listener and the caches: not counted
RAW_QUEUE = "bench-raw"  # served by no worker: the run claimed by hand for bare appends
RUN_TIMEOUT_S = 60.0

# The command line: --backends and --pg-url, and these, in the order --help lists them.
COUNTS = [
    common.Count("--steps", 200, "no-op steps per timed run", at_least=2),
    common.Count("--events", 2000, "events per append-rate run", at_least=2),
    common.Count("--follow-events", 300, "events timed from append to delivery in another process",
                 at_least=2),
]


async def nothing() -> None:
    """The step body: as cheap as a step can be (a coroutine runs on the loop), so the
    step costs only what ctx.step does, its journal write first."""
    return None


def nothing_in_thread() -> None:
    """A plain function as the step body: a step runs it in a thread, as it must any
    plain function (it may block), so the step costs a thread's round trip more."""
    return None


async def stepper(ctx: rw.Context, steps: int, in_thread: bool = False) -> None:
    body = nothing_in_thread if in_thread else nothing
    for i in range(steps):
        await ctx.step(f"s{i}", body)


async def emitter(ctx: rw.Context, events: int) -> float:
    """Emit in a tight loop; return the seconds it took, measured inside the run so that
    claim and finish are not counted."""
    t0 = time.perf_counter()
    for i in range(events):
        await ctx.emit("tick", {"i": i})
    return time.perf_counter() - t0


async def paced_emitter(ctx: rw.Context, events: int, interval_s: float) -> None:
    """Emit spaced events, each stamped with the wall clock just before its append."""
    for _ in range(events):
        await ctx.emit("tick", {"t": time.time()})
        await asyncio.sleep(interval_s)


def with_tasks(target: rw.App) -> rw.App:
    target.task(stepper, retries=0)
    target.task(emitter, retries=0)
    target.task(paced_emitter, retries=0)
    return target


# The app the worker processes load; they set RUNWRIGHT_URL before importing us.
app = with_tasks(rw.App())


@dataclass
class Figures:
    backend: str
    run_ms: tuple[float, float] | None = None  # median run of (0 steps, --steps steps)
    step_us: float | None = None
    thread_step_us: float | None = None  # the same with a plain function as the body
    raw_step_us: float | None = None
    hop_us: float | None = None  # SQLite: a round trip to the store's thread and back
    emit_per_s: float | None = None
    append_per_s: float | None = None
    follow_ms: tuple[float, float] | None = None  # p50, p99
    followed: int = 0
    notes: list[str] = field(default_factory=list)


# -- bare SQL: the journal write without runwright --------------------------------------

# The same shape as runwright's step write, minus its `step` event and NOTIFY: a fenced
# UPDATE of the run's row and an INSERT of the step, in one statement (one round trip).
PG_RAW_SETUP = """
CREATE TABLE raw_runs (id bigint PRIMARY KEY, fence bigint NOT NULL, state text NOT NULL,
    last_seq integer NOT NULL DEFAULT 0);
CREATE TABLE raw_steps (run_id bigint NOT NULL, position integer NOT NULL, name text NOT NULL,
    status text NOT NULL, result text, error text, fence bigint NOT NULL,
    created_at double precision NOT NULL, PRIMARY KEY (run_id, position));
INSERT INTO raw_runs (id, fence, state) VALUES (1, 1, 'running');
"""
PG_RAW_STEP = """
WITH bumped AS (
    UPDATE raw_runs SET last_seq = last_seq + 1 WHERE id = 1 AND fence = 1 AND state = 'running'
    RETURNING last_seq
)
INSERT INTO raw_steps (run_id, position, name, status, result, fence, created_at)
SELECT 1, $1, $2, 'done', 'null', 1, $3 FROM bumped
"""

SQLITE_RAW_SETUP = """
CREATE TABLE raw_runs (id INTEGER PRIMARY KEY, fence INTEGER NOT NULL, state TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0);
CREATE TABLE raw_steps (run_id INTEGER NOT NULL, position INTEGER NOT NULL, name TEXT NOT NULL,
    status TEXT NOT NULL, result TEXT, error TEXT, fence INTEGER NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (run_id, position)) WITHOUT ROWID;
INSERT INTO raw_runs (id, fence, state) VALUES (1, 1, 'running');
"""
SQLITE_RAW_BUMP = ("UPDATE raw_runs SET last_seq = last_seq + 1"
                   " WHERE id = 1 AND fence = 1 AND state = 'running'")
SQLITE_RAW_STEP = ("INSERT INTO raw_steps (run_id, position, name, status, result, fence, created_at)"
                   " VALUES (1, ?, ?, 'done', 'null', 1, ?)")


async def raw_step_pg(dsn: str, schema: str, steps: int) -> float:
    """µs per bare step write on one asyncpg connection: median of ROUNDS rounds."""
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.execute(PG_RAW_SETUP)
        step = await conn.prepare(PG_RAW_STEP)
        per_round, position = [], 0
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(steps):
                await step.fetch(position, f"s{position}", time.time())
                position += 1
            per_round.append((time.perf_counter() - t0) / steps * 1e6)
        return statistics.median(per_round)
    finally:
        await conn.close()


def raw_step_sqlite(path: str, steps: int) -> float:
    """µs per bare step write: BEGIN IMMEDIATE, UPDATE, INSERT, COMMIT on the calling thread,
    with the store's own settings (WAL, synchronous=NORMAL). Median of ROUNDS rounds."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(SQLITE_RAW_SETUP)
        per_round, position = [], 0
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(steps):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(SQLITE_RAW_BUMP)
                conn.execute(SQLITE_RAW_STEP, (position, f"s{position}", time.time()))
                conn.execute("COMMIT")
                position += 1
            per_round.append((time.perf_counter() - t0) / steps * 1e6)
        return statistics.median(per_round)
    finally:
        conn.close()


async def thread_round_trip(steps: int) -> float:
    """µs for one round trip from the event loop to a thread of its own and back, with no
    work: what the SQLite store pays on each write (its connection lives in such a thread,
    so that a lock wait or a checkpoint never stops the loop). Median of ROUNDS rounds."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as thread:
        await loop.run_in_executor(thread, int)  # the thread is started
        per_round = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(steps):
                await loop.run_in_executor(thread, int)
            per_round.append((time.perf_counter() - t0) / steps * 1e6)
    return statistics.median(per_round)


REDIS_RAW_STEP = """
local seq = redis.call('HINCRBY', KEYS[1], 'last_seq', 1)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[3])
return seq
"""


async def raw_step_redis(namespace: str, steps: int) -> float:
    """µs per bare step write on Redis: one script that bumps a run's seq, writes the
    step and appends its event (the keys share the namespace's hash tag, so they are
    deleted with it). Median of ROUNDS rounds."""
    client = redis.asyncio.Redis.from_url(common.REDIS_URL)
    try:
        step = client.register_script(REDIS_RAW_STEP)
        keys = [f"raw:{{{namespace}}}:{name}" for name in ("run", "steps", "events")]
        per_round, position = [], 0
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(steps):
                await step(keys=keys, args=[position, f"s{position}", time.time()])
                position += 1
            per_round.append((time.perf_counter() - t0) / steps * 1e6)
        return statistics.median(per_round)
    finally:
        await client.aclose()


# -- the store called directly: event appends without a task ----------------------------


async def measure_store_append(bench: rw.App, events: int, figures: Figures) -> None:
    """`store.event_append` in a loop on a run claimed by hand, by a worker registered
    here for it (only a registered worker claims; this process's liveness keeps it alive,
    so no rescuer takes the run back), and deregistered after."""
    handle = await bench.submit("emitter", events=0, queue=RAW_QUEUE)
    worker_id = await bench.store.worker_register(WorkerRegisterParams(
        "bench", os.getpid(), [RAW_QUEUE], ["emitter"]))
    try:
        await _append_on_claimed(bench, handle.id, worker_id, events, figures)
    finally:
        await bench.store.worker_deregister(worker_id)


async def _append_on_claimed(bench: rw.App, run_id: int, worker_id: int, events: int,
                             figures: Figures) -> None:
    (run,) = await bench.store.run_claim(RunClaimParams(
        worker_id=worker_id, queues=[RAW_QUEUE], tasks=["emitter"], limit=1, lease_s=600))
    if run.id != run_id:
        raise BenchError(f"claimed run {run.id}, expected {run_id}")
    data = json.dumps({"i": 0})
    rates = []
    for _ in range(RATE_ROUNDS):
        t0 = time.perf_counter()
        for _ in range(events):
            if await bench.store.event_append(EventAppendParams(run.id, run.fence, [("tick", data)])) is None:
                raise BenchError(f"event_append refused on run {run.id}: the fence moved")
        rates.append(events / (time.perf_counter() - t0))
    await bench.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.SUCCEEDED,
                                                       result="null")])
    figures.append_per_s = statistics.median(rates)
    say(figures.backend, f"store.event_append called directly: {figures.append_per_s:,.0f} events/s")


# -- an in-process worker: steps and emits ----------------------------------------------


async def run_once(bench: rw.App, task: str, **kwargs: Any) -> rw.Run:
    handle = await bench.submit(task, **kwargs)
    await handle.result(timeout_s=RUN_TIMEOUT_S)  # raises if the run failed
    return handle.run


def duration_ms(run: rw.Run) -> float:
    """Claim to durable finish, as the store recorded them: no wake-up latency counted."""
    return (run.finished_at - run.started_at) * 1000


async def measure_steps(bench: rw.App, steps: int, figures: Figures) -> None:
    """Runs of `steps` no-op steps (a coroutine body, then a plain function's) and of
    none, interleaved; the step's cost is the difference of the medians over `steps`. A
    first round warms up and is not counted."""
    empty, full, threaded = [], [], []
    for i in range(ROUNDS + 1):
        run_0 = await run_once(bench, "stepper", steps=0)
        run_n = await run_once(bench, "stepper", steps=steps)
        run_t = await run_once(bench, "stepper", steps=steps, in_thread=True)
        if i > 0:
            empty.append(duration_ms(run_0))
            full.append(duration_ms(run_n))
            threaded.append(duration_ms(run_t))
    figures.run_ms = (statistics.median(empty), statistics.median(full))
    figures.step_us = (figures.run_ms[1] - figures.run_ms[0]) / steps * 1000
    figures.thread_step_us = (statistics.median(threaded) - figures.run_ms[0]) / steps * 1000
    say(figures.backend, f"run of 0 steps {figures.run_ms[0]:.2f} ms, of {steps} steps "
                         f"{figures.run_ms[1]:.2f} ms: {figures.step_us:.0f} µs per step, "
                         f"{figures.thread_step_us:.0f} µs with a plain function (median of {ROUNDS})")


async def measure_emit(bench: rw.App, events: int, figures: Figures) -> None:
    rates = []
    for _ in range(RATE_ROUNDS):
        run = await run_once(bench, "emitter", events=events)
        rates.append(events / run.value())
    figures.emit_per_s = statistics.median(rates)
    say(figures.backend, f"ctx.emit in a tight loop: {figures.emit_per_s:,.0f} events/s "
                         f"(median of {RATE_ROUNDS} runs of {events:,})")


async def with_worker(bench: rw.App, args: argparse.Namespace, figures: Figures) -> None:
    """The step and emit phases, on a worker in this process (`app.worker`, sharing the
    benchmark's store); what it logs at WARNING or above becomes notes."""
    worker = bench.worker(concurrency=4)
    with ProblemLog("the in-process worker") as problems:
        running = asyncio.create_task(worker.run())
        try:
            await measure_steps(bench, args.steps, figures)
            await measure_emit(bench, args.events, figures)
        finally:
            worker.stop()
            await running
    figures.notes.extend(problems.problems())


# -- follow latency: a worker process appends, another process follows ------------------


def follower_process(url: str, run_id: int, ready: Any, out: Any) -> None:
    """Follow the run's log; for each tick, the lag from its emission to its delivery here.
    `ready` is set at the first event (the submission): by then the listener is up."""

    async def follow() -> list[float]:
        follower = rw.App(url)
        lags = []
        try:
            async for event in follower.events(run_id):
                received = time.time()
                if event.kind == "tick":
                    lags.append((received - event.data["t"]) * 1000)
                ready.set()
        finally:
            await follower.close()
        return lags

    with ProblemLog("the follower") as problems, event_loop_runner() as runner:
        try:
            out.put((runner.run(follow()), problems.problems()))
        except Exception as exc:  # reported by the parent, not lost in a child's stderr
            out.put(([], [*problems.problems(), f"follower failed: {type(exc).__name__}: {exc}"]))


async def measure_follow(bench: rw.App, workers: Workers, count: int, figures: Figures) -> None:
    """Submit first, start the follower and let it reach the live wait, and only then start
    the worker: every counted tick is delivered live, none read from a backlog."""
    handle = await bench.submit("paced_emitter", events=count + FOLLOW_WARMUP,
                                interval_s=FOLLOW_INTERVAL_S)
    # Spawned, not forked: the parent holds an event loop and open connections.
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    follower = ctx.Process(target=follower_process, args=(bench.url, handle.id, ready, out), daemon=True)
    follower.start()
    try:
        await poll(ready.is_set, follower, "the follower's first event")
        workers.start(1)
        await handle.result(timeout_s=RUN_TIMEOUT_S)
        lags, problems = await poll(lambda: _get_nowait(out), follower, "the follower's figures")
    finally:
        follower.join(5)
        if follower.is_alive():
            follower.kill()
            follower.join()
    figures.notes.extend(problems)
    counted = lags[FOLLOW_WARMUP:]
    figures.followed = len(counted)
    if len(lags) != count + FOLLOW_WARMUP:
        figures.notes.append(f"follower saw {len(lags)} of {count + FOLLOW_WARMUP} ticks")
    if len(counted) < 2:
        raise BenchError(f"only {len(counted)} ticks followed: no percentile to give")
    figures.follow_ms = (statistics.median(counted), p99(counted))
    say(figures.backend, "append-to-delivery in another process, {} events {:.0f} ms apart: "
                         "p50 {:.2f} ms p99 {:.2f} ms".format(len(counted), FOLLOW_INTERVAL_S * 1000,
                                                             *figures.follow_ms))


async def poll(check: Callable[[], Any], proc: Any, what: str, timeout_s: float = 30.0) -> Any:
    """Wait for `check()` to be truthy, in the loop rather than in a blocked thread (which a
    SIGTERM could not stop); give up when the process we wait on died."""
    deadline = time.perf_counter() + timeout_s
    while not (value := check()):
        if not proc.is_alive() and not (value := check()):
            raise BenchError(f"{what}: the process exited with code {proc.exitcode}")
        if time.perf_counter() > deadline:
            raise BenchError(f"{what}: nothing after {timeout_s:.0f} s")
        await asyncio.sleep(0.01)
    return value


def _get_nowait(out: Any) -> Any:
    try:
        return out.get_nowait()
    except queue.Empty:
        return None


# -- one backend, start to end ----------------------------------------------------------


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, 4, tmp, args.pg_url) as session:
        await session.bench.open()  # creates the schema, where the raw tables go too
        if backend == "sqlite":
            figures.raw_step_us = raw_step_sqlite(str(tmp / "raw.db"), args.steps)
            figures.hop_us = await thread_round_trip(args.steps)
            say(backend, f"a thread's round trip, no work: {figures.hop_us:.0f} µs")
        elif backend == "redis":
            figures.raw_step_us = await raw_step_redis(session.schema, args.steps)
        else:
            figures.raw_step_us = await raw_step_pg(args.pg_url, session.schema, args.steps)
        how = "one Lua script" if backend == "redis" else "UPDATE + INSERT, one transaction"
        say(backend, f"bare step write ({how}): {figures.raw_step_us:.0f} µs")
        await measure_store_append(session.bench, args.events, figures)
        await with_worker(session.bench, args, figures)
        await measure_follow(session.bench, session.workers, args.follow_events, figures)
    return figures


# -- report -----------------------------------------------------------------------------


def ratio(f: Figures) -> str:
    """What a step costs over the bare SQL write under it: the framework's share of it."""
    if f.step_us is None or not f.raw_step_us:
        return "-"
    return f"{f.step_us / f.raw_step_us:.1f}x"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("run of 0 / N steps", lambda f: pair(f.run_ms, "ms")),
        ("ctx.step overhead", lambda f: num(f.step_us, "µs")),
        ("  a plain function's", lambda f: num(f.thread_step_us, "µs")),
        ("  bare step write", lambda f: num(f.raw_step_us, "µs")),
        ("  step / bare", ratio),
        ("  a thread's round trip", lambda f: num(f.hop_us, "µs")),
        ("ctx.emit, tight loop", lambda f: num(f.emit_per_s, "/s")),
        ("store.event_append", lambda f: num(f.append_per_s, "/s")),
        ("follow latency p50/p99", lambda f: pair(f.follow_ms, "ms")),
    ]
    header = f"steps {args.steps}, events {args.events:,}, followed events {args.follow_events}"
    return common.render_table(header, rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS)
    common.run_main(common.bench_all(args, bench_backend, summary))
