"""Transactional-step benchmark: what a transactional step costs on PostgreSQL and SQLite,
beside a plain step doing the same write through a connection of its own, beside the bare
write alone.

    cd /work/main && .venv/bin/python -m benchmarks.transactions [--backends sqlite,postgres]
        [--steps 200] [--pg-url URL]

It prints figures; it asserts nothing. The write is one `UPDATE counters SET n = n + 1
WHERE id = $1` of a row of the application's own table, in the store's database (on
PostgreSQL in the benchmark's schema, on SQLite in the store's file):

- **transactional step**: runs of `--steps` steps `ctx.transaction(name, fn)`, each making
  that write, and runs of none, on a worker in the benchmark's process; the run's duration
  is the store's `finished_at - started_at`, and a step's cost the difference of the
  medians of ROUNDS runs, over `--steps` (as durable.py measures `ctx.step`). The write
  and the step's journal entry commit in one transaction: exactly once.
- **plain step, own connection**: the same with `ctx.step(name, fn)`, `fn` making the
  write through a connection of its own that commits it at once (PostgreSQL: one asyncpg
  connection, a coroutine; SQLite: one sqlite3 connection with the store's settings, WAL
  and synchronous=NORMAL, `BEGIN IMMEDIATE` ... `COMMIT` in a plain function, which the
  step runs in a thread). Then the step journals its result in a second transaction, the
  store's: no atomicity between the two.
- **bare write**: the same UPDATE in a loop on one connection, each its own transaction,
  no runwright (PostgreSQL: a prepared statement on one asyncpg connection; SQLite: the
  same connection and settings as the plain step, on the calling thread): the baseline.
  Median of ROUNDS rounds of `--steps` writes.

On SQLite the store keeps one connection and thread for the application's transactions
(store/sqlite/_transactions.py): a step pays no connection of its own.

Each row prints µs per step (or write), its rate and its ratio to the bare write. Redis has
no transactional steps (TransactionsUnsupported): named in --backends, it is only noted. The machine's other
load shows in every figure: on a busy box run it twice.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

import runwright as rw

from . import common
from .common import ProblemLog, num, say

NAME = "transactions"  # PostgreSQL's schema is bench_transactions_<pid>
ROUNDS = 5  # timed runs (and bare rounds) whose median gives a cost
RUN_TIMEOUT_S = 120.0
ROW = "bench"  # the one counter row every write bumps

COUNTS = [common.Count("--steps", 200, "transactional (or plain) steps per timed run", at_least=2)]


def update_sql(table: str) -> str:
    return f"UPDATE {table} SET n = n + 1 WHERE id = $1"


@dataclass
class Apart:
    """The plain step's own connection, made before the runs: asyncpg or sqlite3."""

    pg: asyncpg.Connection | None = None
    sqlite: sqlite3.Connection | None = None
    table: str = ""


APART = Apart()  # the in-process worker's tasks find it here


async def bump(tx: Any, table: str) -> None:
    await tx.execute(update_sql(table), ROW)


async def in_transactions(ctx: rw.Context, steps: int, table: str) -> None:
    for i in range(steps):
        await ctx.transaction(f"t{i}", bump, table)


def sqlite_write(conn: sqlite3.Connection, sql: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(sql, (ROW,))
    conn.execute("COMMIT")


async def pg_apart() -> None:
    assert APART.pg is not None
    await APART.pg.execute(update_sql(APART.table), ROW)


def sqlite_apart() -> None:
    assert APART.sqlite is not None
    sqlite_write(APART.sqlite, update_sql(APART.table).replace("$1", "?"))


async def in_plain_steps(ctx: rw.Context, steps: int) -> None:
    body = pg_apart if APART.pg is not None else sqlite_apart
    for i in range(steps):
        await ctx.step(f"s{i}", body)


def with_tasks(target: rw.App) -> rw.App:
    target.task(in_transactions, retries=0)
    target.task(in_plain_steps, retries=0)
    return target


app = with_tasks(rw.App())  # importable without side effects, as common.Workers expects


@dataclass
class Figures:
    backend: str
    empty_ms: float | None = None  # median run of no step
    txn_us: float | None = None
    plain_us: float | None = None
    bare_us: float | None = None
    notes: list[str] = field(default_factory=list)


# -- the bare write ---------------------------------------------------------------------

async def bare_pg(conn: asyncpg.Connection, table: str, writes: int) -> float:
    update = await conn.prepare(update_sql(table))
    per_round = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(writes):
            await update.fetch(ROW)
        per_round.append((time.perf_counter() - t0) / writes * 1e6)
    return statistics.median(per_round)


def bare_sqlite(conn: sqlite3.Connection, table: str, writes: int) -> float:
    sql = update_sql(table).replace("$1", "?")
    per_round = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(writes):
            sqlite_write(conn, sql)
        per_round.append((time.perf_counter() - t0) / writes * 1e6)
    return statistics.median(per_round)


def sqlite_connection(path: str) -> sqlite3.Connection:
    """The store's settings (WAL, synchronous=NORMAL); usable from the step's thread."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


# -- steps on an in-process worker ------------------------------------------------------

async def run_ms(bench: rw.App, task: str, **kwargs: Any) -> float:
    handle = await bench.submit(task, **kwargs)
    await handle.result(timeout_s=RUN_TIMEOUT_S)  # raises if the run failed
    run = handle.run
    return (run.finished_at - run.started_at) * 1000


async def measure_steps(bench: rw.App, steps: int, table: str, figures: Figures) -> None:
    """Runs of no step, of `steps` transactional steps and of `steps` plain ones,
    interleaved; a first round warms up and is not counted."""
    empty: list[float] = []
    txn: list[float] = []
    plain: list[float] = []
    for i in range(ROUNDS + 1):
        times = (await run_ms(bench, "in_transactions", steps=0, table=table),
                 await run_ms(bench, "in_transactions", steps=steps, table=table),
                 await run_ms(bench, "in_plain_steps", steps=steps))
        if i > 0:
            for kept, value in zip((empty, txn, plain), times):
                kept.append(value)
    figures.empty_ms = statistics.median(empty)
    figures.txn_us = (statistics.median(txn) - figures.empty_ms) / steps * 1000
    figures.plain_us = (statistics.median(plain) - figures.empty_ms) / steps * 1000
    say(figures.backend, f"run of no step {figures.empty_ms:.2f} ms; of {steps} transactional steps "
                         f"{statistics.median(txn):.2f} ms: {figures.txn_us:.0f} µs per step; of {steps} "
                         f"plain steps {statistics.median(plain):.2f} ms: {figures.plain_us:.0f} µs "
                         f"per step (medians of {ROUNDS})")


async def with_worker(bench: rw.App, steps: int, table: str, figures: Figures) -> None:
    worker = bench.worker(concurrency=4)
    with ProblemLog("the in-process worker") as problems:
        running = asyncio.create_task(worker.run())
        try:
            await measure_steps(bench, steps, table, figures)
        finally:
            worker.stop()
            await running
    figures.notes.extend(problems.problems())


# -- one backend, start to end ----------------------------------------------------------

async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    if backend == "redis":
        figures.notes.append("no transactional steps on Redis (TransactionsUnsupported): not measured")
        return figures
    async with common.backend_session(figures, NAME, with_tasks, 4, tmp, args.pg_url) as session:
        await session.bench.open()  # creates the store's schema (or file), where the table goes
        if backend == "postgres":
            APART.table = f'"{session.schema}".counters'
            conn = await asyncpg.connect(args.pg_url, server_settings={"application_name": "bench-txn"})
            try:
                await conn.execute(f"CREATE TABLE {APART.table} (id text PRIMARY KEY, n bigint NOT NULL)")
                await conn.execute(f"INSERT INTO {APART.table} VALUES ($1, 0)", ROW)
                figures.bare_us = await bare_pg(conn, APART.table, args.steps)
                say(backend, f"bare UPDATE on one connection: {figures.bare_us:.0f} µs")
                APART.pg = conn
                await with_worker(session.bench, args.steps, APART.table, figures)
            finally:
                APART.pg = None
                await conn.close()
        else:
            APART.table = "counters"
            conn_sqlite = sqlite_connection(str(tmp / "bench.db"))
            try:
                conn_sqlite.execute(f"CREATE TABLE {APART.table} (id TEXT PRIMARY KEY, n INTEGER NOT NULL)")
                conn_sqlite.execute(f"INSERT INTO {APART.table} VALUES (?, 0)", (ROW,))
                figures.bare_us = bare_sqlite(conn_sqlite, APART.table, args.steps)
                say(backend, f"bare BEGIN IMMEDIATE; UPDATE; COMMIT on one connection: "
                             f"{figures.bare_us:.0f} µs")
                APART.sqlite = conn_sqlite
                await with_worker(session.bench, args.steps, APART.table, figures)
            finally:
                APART.sqlite = None
                conn_sqlite.close()
    return figures


# -- report -----------------------------------------------------------------------------

def per_s(us: float | None) -> str:
    return "-" if not us else f"{1e6 / us:,.0f} /s"


def over_bare(us: float | None, f: Figures) -> str:
    return "-" if us is None or not f.bare_us else f"{us / f.bare_us:.1f}x"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("transactional step", lambda f: num(f.txn_us, "µs")),
        ("  steps/s", lambda f: per_s(f.txn_us)),
        ("  / bare write", lambda f: over_bare(f.txn_us, f)),
        ("plain step, own connection", lambda f: num(f.plain_us, "µs")),
        ("  steps/s", lambda f: per_s(f.plain_us)),
        ("  / bare write", lambda f: over_bare(f.plain_us, f)),
        ("bare write (baseline)", lambda f: num(f.bare_us, "µs")),
        ("  writes/s", lambda f: per_s(f.bare_us)),
        ("run of no step", lambda f: "-" if f.empty_ms is None else f"{f.empty_ms:.2f} ms"),
    ]
    header = f"steps {args.steps} per run, each one UPDATE of a counter row; medians of {ROUNDS}"
    return common.render_table(header, rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS, default_backends=("sqlite", "postgres"))
    common.run_main(common.bench_all(args, bench_backend, summary))
