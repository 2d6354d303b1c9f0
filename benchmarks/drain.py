"""Drain benchmark: how fast runwright submits, drains and recovers runs, per backend,
next to the raw claim-and-complete SQL it is built on (measured in the same run).

    cd /work/main && .venv/bin/python -m benchmarks.drain [--backends sqlite,postgres]

It prints figures; it asserts nothing. The worker processes it starts import this module
(`benchmarks.drain:app`), so the module-level `app` and its tasks must stay importable
without side effects.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import random
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine, Sequence

import asyncpg
import redis.asyncio

import runwright as rw
from runwright.store._params import RunCountParams

from . import common
from .common import BenchError, Workers, event_loop_runner, p99, pair, say
from .cpu import CpuMeter, CpuSample, pg_backends, redis_server

NAME = "drain"  # the workers load benchmarks.drain:app; PostgreSQL's schema is bench_drain_<pid>
POLL_S = 0.02  # how often run counts are read while a batch drains
RUN_POLL_S = 0.005  # how often one run is re-read while waiting for a takeover
DRAIN_TIMEOUT_S = 120.0
LATENCY_WARMUP = 5  # first round trips open the listener and warm caches: not counted
SLEEP_S = 60.0  # the sleeper outlives every takeover measurement

# The command line: --backends and --pg-url, and these, in the order --help lists them.
COUNTS = [
    common.Count("--runs", 10_000, "runs per drained batch"),
    common.Count("--concurrency", 200, "slots per worker; also the raw baseline's batch size"),
    common.Count("--workers", 2, "worker processes", at_least=2, why="a takeover needs a survivor"),
    common.Count("--latency-runs", 200, "runs timed one at a time"),
    common.Count("--takeovers", 3, "SIGKILL rounds (median printed)"),
    common.Count("--rounds", 3, "pre-submitted drains, raw races and floor races (medians printed)",
                 at_least=1),
]


async def noop(n: int) -> None:
    return None


async def sleeper(seconds: float) -> None:
    await asyncio.sleep(seconds)


def with_tasks(target: rw.App) -> rw.App:
    target.task(noop)
    target.task(sleeper)
    return target


# The app the worker processes load; they set RUNWRIGHT_URL before importing us.
app = with_tasks(rw.App())


CpuUs = tuple[float, "float | None"]  # CPU µs per run: (workers, database; None on SQLite)


def median_cpu(rounds: list[CpuUs]) -> CpuUs:
    """The median of each part over the rounds (the database's None where it has none)."""
    databases = [database for _, database in rounds if database is not None]
    return (statistics.median(workers for workers, _ in rounds),
            statistics.median(databases) if databases else None)


@dataclass
class Figures:
    backend: str
    submit_per_s: float | None = None
    startup_s: float | None = None
    drain_per_s: float | None = None
    steady_per_s: float | None = None
    raw_per_s: float | None = None
    start_ms: tuple[float, float] | None = None
    round_trip_ms: tuple[float, float] | None = None
    takeovers_s: list[float] = field(default_factory=list)
    rss_mib: list[tuple[float, float]] = field(default_factory=list)  # (now, peak) per worker
    # CPU µs per run of the pre-submitted drain and of the raw loop: (workers, database);
    # the database's None on SQLite, which runs inside the workers.
    drain_cpu_us: tuple[float, float | None] | None = None
    raw_cpu_us: tuple[float, float | None] | None = None
    # The raw loop again, running each run it claims as an asyncio task (its arguments
    # decoded, its result encoded): what any asyncio worker pays on top of the database.
    floor_per_s: float | None = None
    floor_cpu_us: tuple[float, float | None] | None = None
    # Every round's drain rate, every race's rate and CPU (raw loop, floor): the figures
    # above are their medians. A race of 10,000 runs lasts a tenth of a second, a drain
    # half a second: too short for one to stand alone on a loaded machine.
    drain_rounds: list[float] = field(default_factory=list)
    raw_races: list[tuple[float, CpuUs]] = field(default_factory=list)
    floor_races: list[tuple[float, CpuUs]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- waiting on the store ---------------------------------------------------------------


async def wait_counts(bench: rw.App, until: Callable[[dict[str, int]], bool], what: str,
                      timeout_s: float = DRAIN_TIMEOUT_S) -> float:
    """Poll the run counts until `until(counts)`; return the perf_counter when it held."""
    deadline = time.perf_counter() + timeout_s
    while True:
        counts = await bench.store.run_count_by_state(RunCountParams())
        now = time.perf_counter()
        if until(counts):
            return now
        if now > deadline:
            raise BenchError(f"{what}: not reached after {timeout_s:.0f} s; runs by state: {counts}")
        await asyncio.sleep(POLL_S)


async def wait_run(bench: rw.App, run_id: int, until: Callable[[rw.Run], bool], what: str,
                   timeout_s: float = 20.0) -> rw.Run:
    deadline = time.perf_counter() + timeout_s
    while True:
        run = await bench.store.run_get(run_id)
        if run is not None and until(run):
            return run
        if time.perf_counter() > deadline:
            raise BenchError(f"{what}: not reached after {timeout_s:.0f} s; run is {run}")
        await asyncio.sleep(RUN_POLL_S)


async def wait_workers(bench: rw.App, workers: Workers, timeout_s: float = 20.0) -> None:
    """Until exactly our live workers are registered (dead ones are removed by rescue)."""
    wanted = {proc.pid for proc in workers.procs}
    deadline = time.perf_counter() + timeout_s
    while {w.pid for w in await bench.store.worker_list()} != wanted:
        if time.perf_counter() > deadline:
            raise BenchError(f"workers {sorted(wanted)} did not register in {timeout_s:.0f} s")
        await asyncio.sleep(POLL_S)


def succeeded(counts: dict[str, int]) -> int:
    return counts.get("succeeded", 0)


# -- the phases -------------------------------------------------------------------------


async def measure_submit_and_drain(bench: rw.App, workers: Workers, args: argparse.Namespace,
                                   figures: Figures, meter: CpuMeter) -> None:
    """`--rounds` pre-submitted batches, each drained by workers started afterwards (those
    of the round before stopped first); the figures are the rounds' medians. The drain
    clock starts at the first claim seen, so interpreter start-up is reported apart, not
    averaged in."""
    rounds: list[tuple[float, float, float, CpuUs]] = []
    for _ in range(args.rounds):
        workers.stop_all()
        rounds.append(await submit_and_drain(bench, workers, args, figures.backend, meter))
    figures.drain_rounds = [drain for _, _, drain, _ in rounds]
    figures.submit_per_s = statistics.median(submit for submit, _, _, _ in rounds)
    figures.startup_s = statistics.median(startup for _, startup, _, _ in rounds)
    figures.drain_per_s = statistics.median(figures.drain_rounds)
    figures.drain_cpu_us = median_cpu([cpu for _, _, _, cpu in rounds])


async def submit_and_drain(bench: rw.App, workers: Workers, args: argparse.Namespace, backend: str,
                           meter: CpuMeter) -> tuple[float, float, float, CpuUs]:
    """One round: (submit_many per s, start-up s, drain per s, CPU µs per run)."""
    before = succeeded(await bench.store.run_count_by_state(RunCountParams()))
    items = [{"n": i} for i in range(args.runs)]
    t0 = time.perf_counter()
    await bench.submit_many("noop", items)
    submit_per_s = args.runs / (time.perf_counter() - t0)
    say(backend, f"submit_many of {args.runs:,}: {submit_per_s:,.0f} runs/s")

    spawned = time.perf_counter()
    workers.start(args.workers)
    first = await wait_counts(bench, lambda c: c.get("queued", 0) < args.runs, "first claim")
    # From the first claim: the workers' start-up (imports, connecting) is not a run's cost.
    # The runs claimed before the sample are few, and counted in the divisor: a slight
    # overestimate of the CPU per run, never an underestimate.
    await meter.start()
    done = await wait_counts(bench, lambda c: succeeded(c) >= before + args.runs, "pre-submitted drain")
    cpu_us = await meter.per_run_us(args.runs)
    drain_per_s = args.runs / (done - first)
    say(backend, f"drain by {args.workers} workers: {drain_per_s:,.0f} runs/s "
                 f"(worker start-up to first claim {first - spawned:.2f} s); CPU per run {cpu_pair(cpu_us)}")
    return submit_per_s, first - spawned, drain_per_s, cpu_us


async def measure_steady_drain(bench: rw.App, args: argparse.Namespace, figures: Figures) -> None:
    """Workers already running and idle: the clock runs from the submit to the last run."""
    before = succeeded(await bench.store.run_count_by_state(RunCountParams()))
    items = [{"n": i} for i in range(args.runs)]
    t0 = time.perf_counter()
    await bench.submit_many("noop", items)
    done = await wait_counts(bench, lambda c: succeeded(c) >= before + args.runs, "steady drain")
    figures.steady_per_s = args.runs / (done - t0)
    say(figures.backend, f"submit + drain with workers running: {figures.steady_per_s:,.0f} runs/s")


async def measure_latency(bench: rw.App, args: argparse.Namespace, figures: Figures) -> None:
    """One idle worker, one run at a time: the cost of a run when nothing else happens."""
    starts, round_trips = [], []
    for i in range(LATENCY_WARMUP + args.latency_runs):
        t0 = time.perf_counter()
        handle = await bench.submit("noop", n=i)
        await handle.result(timeout_s=10)
        round_trip = time.perf_counter() - t0
        run = await handle.refresh()
        if i >= LATENCY_WARMUP:
            round_trips.append(round_trip * 1000)
            starts.append((run.started_at - run.created_at) * 1000)
    figures.start_ms = (statistics.median(starts), p99(starts))
    figures.round_trip_ms = (statistics.median(round_trips), p99(round_trips))
    say(figures.backend, "submit-to-start p50 {:.2f} ms p99 {:.2f} ms; round trip p50 {:.2f} ms "
                         "p99 {:.2f} ms".format(*figures.start_ms, *figures.round_trip_ms))


async def measure_takeovers(bench: rw.App, workers: Workers, count: int, rounds: int,
                            figures: Figures) -> None:
    """SIGKILL the owner of a long run; time until another worker has claimed it anew
    (its fence went up). Each round starts with `count` live, registered workers."""
    sleepers = []
    for _ in range(rounds):
        workers.start(count - len(workers.procs))
        await wait_workers(bench, workers)
        # A worker's first rescue tick comes one interval after it starts: killing right
        # away would time that interval, not a takeover. Wait past it, by a random amount
        # so the kill lands at a random point of the survivor's rescue cycle.
        await asyncio.sleep(random.uniform(1.0, 1.6))
        handle = await bench.submit("sleeper", seconds=SLEEP_S)
        sleepers.append(handle.id)
        run = await wait_run(bench, handle.id, lambda r: r.state is rw.RunState.RUNNING, "sleeper start")
        owners = {w.id: w.pid for w in await bench.store.worker_list()}
        victim = workers.by_pid(owners[run.owner])
        t0 = time.perf_counter()
        workers.kill(victim)
        await wait_run(bench, run.id, lambda r: r.fence > run.fence and r.state is rw.RunState.RUNNING,
                       "takeover")
        figures.takeovers_s.append(time.perf_counter() - t0)
    say(figures.backend, "takeover after SIGKILL: " + ", ".join(f"{s:.2f} s" for s in figures.takeovers_s))
    # Cancelled now, so that the workers' graceful stop does not wait out its grace period.
    for run_id in sleepers:
        await bench.cancel(run_id)
    for run_id in sleepers:
        await asyncio.wait_for(bench.wait_done(run_id), 10)


# -- raw SQL baseline -------------------------------------------------------------------

PG_RAW_SETUP = """
CREATE TABLE raw_runs (id bigserial PRIMARY KEY, state text NOT NULL, fence int NOT NULL DEFAULT 0,
    owner int, lease_expires_at float8, priority smallint NOT NULL, run_at float8 NOT NULL, result text);
CREATE INDEX raw_runs_due ON raw_runs (priority, run_at, id) WHERE state = 'queued';
"""
PG_RAW_FILL = """
INSERT INTO raw_runs (state, priority, run_at)
SELECT 'queued', 2, extract(epoch FROM clock_timestamp()) FROM generate_series(1, $1)
"""
PG_RAW_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT id FROM raw_runs WHERE state = 'queued' AND run_at <= $1
    ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE raw_runs t SET state = 'running', fence = t.fence + 1, owner = $3, lease_expires_at = $1 + 30
FROM picked WHERE t.id = picked.id
RETURNING t.id, t.fence
"""
PG_RAW_COMPLETE = """
UPDATE raw_runs t SET state = 'succeeded', owner = NULL, lease_expires_at = NULL, result = 'null'
FROM unnest($1::bigint[], $2::int[]) AS v(id, fence)
WHERE t.id = v.id AND t.fence = v.fence AND t.state = 'running'
"""

SQLITE_RAW_SETUP = """
CREATE TABLE raw_runs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, fence INTEGER NOT NULL DEFAULT 0,
    owner INTEGER, lease_expires_at REAL, priority INTEGER NOT NULL, run_at REAL NOT NULL, result TEXT);
CREATE INDEX raw_runs_due ON raw_runs (priority, run_at, id) WHERE state = 'queued';
"""
SQLITE_RAW_CLAIM = """
UPDATE raw_runs SET state = 'running', fence = fence + 1, owner = ?, lease_expires_at = ? + 30
WHERE id IN (SELECT id FROM raw_runs WHERE state = 'queued' AND run_at <= ?
             ORDER BY priority, run_at, id LIMIT ?)
RETURNING id, fence
"""
SQLITE_RAW_COMPLETE = """
UPDATE raw_runs SET state = 'succeeded', owner = NULL, lease_expires_at = NULL, result = 'null'
WHERE id = ? AND fence = ? AND state = 'running'
"""


# The floor's run: a no-op task called with its arguments decoded, as a worker calls one.
FLOOR_ARGS = '{"n": 1}'


async def as_tasks(count: int) -> list[str]:
    """`count` runs of `noop`, each an asyncio task, their results encoded."""
    tasks = [asyncio.create_task(noop(**json.loads(FLOOR_ARGS))) for _ in range(count)]
    return [json.dumps(await task) for task in tasks]


def raw_pg_process(dsn: str, schema: str, batch: int, floor: bool, owner: int, start: Any,
                   done: Any) -> None:
    """One raw worker: claim a batch, complete it in one statement, until nothing is left
    (with `floor`, each claimed run is executed as a task in between)."""

    async def loop() -> tuple[int, float]:
        # Named after the schema, as the store's sessions are: the CPU meter finds its backend.
        conn = await asyncpg.connect(dsn, server_settings={"search_path": schema,
                                                           "application_name": f"raw:{schema}"})
        try:
            cpu0 = released(start)
            total = 0
            while rows := await conn.fetch(PG_RAW_CLAIM, time.time(), batch, owner):
                if floor:
                    await as_tasks(len(rows))
                await conn.execute(PG_RAW_COMPLETE, [r[0] for r in rows], [r[1] for r in rows])
                total += len(rows)
            finished(start, done, total, cpu0)  # the session stays until its CPU was read
            return total, time.process_time() - cpu0
        finally:
            await conn.close()

    with event_loop_runner() as runner:
        runner.run(loop())


def raw_sqlite_process(path: str, batch: int, floor: bool, owner: int, start: Any, done: Any) -> None:
    """One raw worker on SQLite: the same cycle, each step its own BEGIN IMMEDIATE."""
    with event_loop_runner() as runner:
        raw_sqlite_loop(path, batch, owner, start, done, runner if floor else None)


def raw_sqlite_loop(path: str, batch: int, owner: int, start: Any, done: Any,
                    floor: asyncio.Runner | None) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    cpu0 = released(start)
    total = 0
    while True:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(SQLITE_RAW_CLAIM, (owner, now, now, batch)).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        if floor is not None:
            floor.run(as_tasks(len(rows)))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(SQLITE_RAW_COMPLETE, rows)
        conn.execute("COMMIT")
        total += len(rows)
    finished(start, done, total, cpu0)
    conn.close()


# The bare Lua loop the Redis backend is built on: a due sorted set, a hash per run with
# a fence, a claim script that pops a batch and a fenced complete script. No events, no
# journal, no counters: the limit of one round trip per claim and per complete.
REDIS_RAW_CLAIM = """
local now, batch, owner = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - 3)
local out = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, batch)) do
  redis.call('ZREM', KEYS[1], member)
  local key = prefix .. 'run:' .. member
  local fence = redis.call('HINCRBY', key, 'fence', 1)
  redis.call('HSET', key, 'state', 'running', 'owner', owner, 'lease_expires_at', now + 30)
  redis.call('ZADD', prefix .. 'running', now + 30, member)
  out[#out + 1] = member
  out[#out + 1] = fence
end
return out
"""
REDIS_RAW_COMPLETE = """
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - 3)
for i = 1, #ARGV, 2 do
  local key = prefix .. 'run:' .. ARGV[i]
  local f = redis.call('HMGET', key, 'fence', 'state')
  if f[1] == ARGV[i + 1] and f[2] == 'running' then
    redis.call('HSET', key, 'state', 'succeeded', 'result', 'null')
    redis.call('HDEL', key, 'owner', 'lease_expires_at')
    redis.call('ZREM', prefix .. 'running', ARGV[i])
  end
end
return 1
"""


def raw_redis_process(url: str, due_key: str, batch: int, floor: bool, owner: int, start: Any,
                      done: Any) -> None:
    """One raw worker on Redis: claim a batch in one script, complete it in another."""

    async def loop() -> tuple[int, float]:
        client = redis.asyncio.Redis.from_url(url)
        claim = client.register_script(REDIS_RAW_CLAIM)
        complete = client.register_script(REDIS_RAW_COMPLETE)
        try:
            await client.ping()
            cpu0 = released(start)
            total = 0
            while flat := await claim(keys=[due_key], args=[time.time(), batch, owner]):
                if floor:
                    await as_tasks(len(flat) // 2)
                await complete(keys=[due_key], args=flat)
                total += len(flat) // 2
            finished(start, done, total, cpu0)
            return total, time.process_time() - cpu0
        finally:
            await client.aclose()

    with event_loop_runner() as runner:
        done.put(runner.run(loop()))


def released(start: Any) -> float:
    """A raw worker's two waits on the race's barrier: all connected (the parent then reads
    the database's CPU), then go. Returns the process's CPU clock at the go."""
    start.wait()
    start.wait()
    return time.process_time()


def finished(start: Any, done: Any, total: int, cpu0: float) -> None:
    """A raw worker's end: its count and CPU seconds, then a wait until every worker has
    finished and the parent has read the database's CPU (a closed session's backend is
    gone, and its time with it)."""
    done.put((total, time.process_time() - cpu0))
    start.wait()


@dataclass
class RawRace:
    elapsed_s: float
    total: int
    workers_cpu_s: float
    database_cpu_s: float | None


def race_raw(target: Callable[..., None], target_args: tuple[Any, ...], processes: int,
             database: Callable[[], Coroutine[Any, Any, list[int]]] | None = None) -> RawRace:
    """Start the raw workers, release them together once all are connected; return the
    seconds until the last one finished, the runs completed and the CPU spent (each
    worker's own, and the database's `database` pids). Spawned, not forked: the parent
    holds an event loop and open connections a fork would copy. Called in a thread of its
    own, so the database's pids are read on a loop of that thread."""
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Barrier(processes + 1), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*target_args, owner, start, done), daemon=True)
             for owner in range(1, processes + 1)]
    for proc in procs:
        proc.start()
    start.wait(timeout=30)  # all connected
    db_pids: list[int] = asyncio.run(database()) if database else []
    db_before = CpuSample.of(db_pids)
    start.wait(timeout=30)  # go
    t0 = time.perf_counter()
    totals, cpus = zip(*(done.get(timeout=DRAIN_TIMEOUT_S) for _ in procs))
    elapsed = time.perf_counter() - t0
    db_s = CpuSample.of(db_pids).since(db_before) if database else None
    start.wait(timeout=30)  # read: the workers may close their sessions
    for proc in procs:
        proc.join()
    return RawRace(elapsed, sum(totals), sum(cpus), db_s)


async def measure_raw_pg(dsn: str, schema: str, args: argparse.Namespace, figures: Figures,
                         floor: bool = False) -> None:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.execute("DROP TABLE IF EXISTS raw_runs")  # the floor's race refills it
        await conn.execute(PG_RAW_SETUP)
        await conn.execute(PG_RAW_FILL, args.runs)
    finally:
        await conn.close()
    race = await asyncio.to_thread(race_raw, raw_pg_process, (dsn, schema, args.concurrency, floor),
                                   args.workers, pg_backends(dsn, schema))
    record_raw(figures, args, race, floor)


async def measure_raw_redis(namespace: str, args: argparse.Namespace, figures: Figures,
                            floor: bool = False) -> None:
    prefix = "floor" if floor else "raw"  # keys of their own: the floor's race starts full
    due_key = f"{prefix}:{{{namespace}}}:due"
    client = redis.asyncio.Redis.from_url(common.REDIS_URL)
    try:
        now = time.time()
        for start in range(0, args.runs, 1000):
            pipe = client.pipeline(transaction=False)
            for run_id in range(start + 1, min(args.runs, start + 1000) + 1):
                member = f"{run_id:020d}"
                pipe.hset(f"{prefix}:{{{namespace}}}:run:{member}", mapping={"state": "queued", "fence": 0})
                pipe.zadd(due_key, {member: now})
            await pipe.execute()
    finally:
        await client.aclose()
    race = await asyncio.to_thread(race_raw, raw_redis_process,
                                   (common.REDIS_URL, due_key, args.concurrency, floor), args.workers,
                                   redis_server(common.REDIS_URL))
    record_raw(figures, args, race, floor)


async def measure_raw_sqlite(path: str, args: argparse.Namespace, figures: Figures,
                             floor: bool = False) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(SQLITE_RAW_SETUP)
    now = time.time()
    conn.execute("BEGIN")  # one transaction, not one per row
    conn.executemany("INSERT INTO raw_runs (state, priority, run_at) VALUES ('queued', 2, ?)",
                     [(now,)] * args.runs)
    conn.execute("COMMIT")
    conn.close()
    race = await asyncio.to_thread(race_raw, raw_sqlite_process, (path, args.concurrency, floor),
                                   args.workers)
    record_raw(figures, args, race, floor)


def record_raw(figures: Figures, args: argparse.Namespace, race: RawRace, floor: bool) -> None:
    total = race.total
    what = "python floor" if floor else "raw baseline"
    if total != args.runs:
        figures.notes.append(f"{what} completed {total} of {args.runs} rows")
    per_s = total / race.elapsed_s
    cpu_us = (1e6 * race.workers_cpu_s / total,
              None if race.database_cpu_s is None else 1e6 * race.database_cpu_s / total)
    races = figures.floor_races if floor else figures.raw_races
    races.append((per_s, cpu_us))
    middle = (statistics.median(rates(races)), median_cpu([cpu for _, cpu in races]))
    if floor:
        figures.floor_per_s, figures.floor_cpu_us = middle
    else:
        figures.raw_per_s, figures.raw_cpu_us = middle
    language = "Lua" if figures.backend == "redis" else "SQL"
    loop = "the same, each run an asyncio task" if floor else f"raw {language} claim+complete"
    say(figures.backend, f"{loop}, {args.workers} processes, batch {args.concurrency}: "
                         f"{per_s:,.0f} runs/s; CPU per run {cpu_pair(cpu_us)}")


# -- one backend, start to end ----------------------------------------------------------


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, args.concurrency, tmp,
                                      args.pg_url) as session:
        await session.bench.open()
        await bench_framework(session.bench, session.workers, args, figures,
                              meter_of(backend, session.workers, args.pg_url, session.schema))
        await session.bench.close()  # before the raw phase: nothing of ours competes for the CPU
        for race, floor in itertools.product(range(args.rounds), (False, True)):
            if backend == "sqlite":
                name = f"{'floor' if floor else 'raw'}-{race}.db"
                await measure_raw_sqlite(str(tmp / name), args, figures, floor)
            elif backend == "redis":
                await measure_raw_redis(session.schema, args, figures, floor)
            else:
                await measure_raw_pg(args.pg_url, session.schema, args, figures, floor)
    return figures


def meter_of(backend: str, workers: Workers, pg_url: str, schema: str) -> CpuMeter:
    """The CPU meter of the workers and of the database server that serves them."""
    database = (pg_backends(pg_url, schema) if backend == "postgres"
                else redis_server(common.REDIS_URL) if backend == "redis" else None)
    return CpuMeter(lambda: [proc.pid for proc in workers.procs], database)


async def bench_framework(bench: rw.App, workers: Workers, args: argparse.Namespace,
                          figures: Figures, meter: CpuMeter) -> None:
    await measure_submit_and_drain(bench, workers, args, figures, meter)
    await measure_steady_drain(bench, args, figures)
    figures.rss_mib = workers.rss_mib()
    # Latency is measured on one idle worker: stop the others.
    for proc in workers.procs[1:]:
        workers.stop(proc)
    await wait_workers(bench, workers)
    await measure_latency(bench, args, figures)
    await measure_takeovers(bench, workers, args.workers, args.takeovers, figures)
    counts = await bench.store.run_count_by_state(RunCountParams())
    expected = (args.rounds + 1) * args.runs + LATENCY_WARMUP + args.latency_runs
    if succeeded(counts) != expected or set(counts) - {"succeeded", "cancelled"}:
        figures.notes.append(f"runs by state at the end: {counts} (expected {expected} succeeded)")


# -- report -----------------------------------------------------------------------------


def rate(value: float | None) -> str:
    """A rate cell: '-' where the phase that measures it did not get that far."""
    return "-" if value is None else f"{value:,.0f}/s"


def share(part: float | None, whole: float | None) -> str:
    """`part` as a share of `whole`: the drain's of the raw limit is what runwright keeps
    of what the database allows on this machine."""
    if part is None or not whole:
        return "-"
    return f"{100 * part / whole:.0f}%"


def cpu_pair(us: tuple[float, float | None] | None) -> str:
    """'workers 41 + database 22 µs': where a run's CPU goes ('in the workers' on SQLite)."""
    if us is None:
        return "-"
    workers, database = us
    if database is None:
        return f"{workers:.0f} µs in the workers"
    return f"workers {workers:.0f} + database {database:.0f} µs"


def spread(rates: Sequence[float]) -> str:
    """' (48k-97k)': the slowest and fastest of a measure's rounds, beside their median."""
    if len(rates) < 2:
        return ""
    return f" ({min(rates) / 1000:.0f}k-{max(rates) / 1000:.0f}k)"


def rates(races: list[tuple[float, CpuUs]]) -> list[float]:
    return [rate for rate, _ in races]


def takeover(f: Figures) -> str:
    """The median, and each round: a takeover's time depends on where the kill lands in
    the survivor's rescue cycle, so the spread is part of the figure."""
    if not f.takeovers_s:
        return "-"
    each = " ".join(f"{s:.2f}" for s in f.takeovers_s)
    return f"{statistics.median(f.takeovers_s):.2f} s ({each})"


def rss(f: Figures) -> str:
    """Each worker's memory now and at its peak, in MiB."""
    if not f.rss_mib:
        return "-"
    return ", ".join(f"{now:.0f} (peak {peak:.0f})" for now, peak in f.rss_mib) + " MiB"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("submit_many", lambda f: rate(f.submit_per_s)),
        ("drain, pre-submitted", lambda f: rate(f.drain_per_s) + spread(f.drain_rounds)),
        ("  raw limit (SQL; Lua on Redis)", lambda f: rate(f.raw_per_s) + spread(rates(f.raw_races))),
        ("  drain / raw", lambda f: share(f.drain_per_s, f.raw_per_s)),
        ("  python floor (raw, a task per run)",
         lambda f: rate(f.floor_per_s) + spread(rates(f.floor_races))),
        ("  floor / raw; drain / floor", lambda f: f"{share(f.floor_per_s, f.raw_per_s)}; "
                                                   f"{share(f.drain_per_s, f.floor_per_s)}"),
        ("CPU per run, drain", lambda f: cpu_pair(f.drain_cpu_us)),
        ("CPU per run, raw", lambda f: cpu_pair(f.raw_cpu_us)),
        ("CPU per run, floor", lambda f: cpu_pair(f.floor_cpu_us)),
        ("submit+drain, workers up", lambda f: rate(f.steady_per_s)),
        ("worker start-up", lambda f: "-" if f.startup_s is None else f"{f.startup_s:.2f} s"),
        ("submit-to-start p50/p99", lambda f: pair(f.start_ms, "ms")),
        ("round trip p50/p99", lambda f: pair(f.round_trip_ms, "ms")),
        ("takeover after SIGKILL", takeover),
        ("worker RSS", rss),
    ]
    header = (f"runs {args.runs:,}, workers {args.workers}, concurrency {args.concurrency}; "
              f"drain, raw loop, floor: median of {args.rounds} (slowest-fastest)")
    return common.render_table(header, rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS)
    common.run_main(common.bench_all(args, bench_backend, summary))
