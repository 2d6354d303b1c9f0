"""`runwright move` benchmark: rows copied per second per kind, SQLite -> PostgreSQL and
back, SQLite -> Redis, and how long the source stays sealed. Beside each, in the same run, the bare read
of the same rows in key order from the source (the copy's floor on reads).

    cd /work/main && .venv/bin/python -m benchmarks.move [--runs 10000] [--steps 3] [--events 5]
        [--pg-url URL] [--redis-url URL]

The source is seeded with ended runs straight in SQL (each with `--steps` journaled steps
and `--events` events), since a move copies rows, whatever their runs did. It prints
figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import time
import uuid

import asyncpg

import runwright as rw
from runwright.move import move
from runwright.move._ends import open_end
from runwright.move._kinds import KINDS

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


def seed(path: str, runs: int, steps: int, events: int) -> None:
    conn = sqlite3.connect(path)
    now = time.time()
    with conn:
        conn.executemany(
            "INSERT INTO runs (id, key, task, queue, priority, state, args, result, attempt, max_attempts,"
            " fence, run_at, created_at, started_at, finished_at, last_seq)"
            " VALUES (?, ?, 'work', 'default', 0, 'succeeded', '{\"n\": 1}', '42', 1, 3, 1, ?, ?, ?, ?, ?)",
            [(i, str(uuid.uuid4()), now, now, now, now, events) for i in range(1, runs + 1)])
        conn.executemany("INSERT INTO steps VALUES (?, ?, ?, 'done', '{\"ok\": true}', NULL, 1, ?)",
                         [(i, p, f"step-{p}", now) for i in range(1, runs + 1) for p in range(steps)])
        conn.executemany("INSERT INTO events (run_id, seq, kind, data, at) VALUES (?, ?, 'step', ?, ?)",
                         [(i, s, json.dumps({"position": s, "name": f"step-{s}"}), now)
                          for i in range(1, runs + 1) for s in range(1, events + 1)])
    conn.close()


async def read_rate(url: str) -> dict[str, float]:
    """Rows per second read in key order, in the move's batches (the floor on reads)."""
    end = await open_end(url)
    rates = {}
    try:
        for kind in KINDS[:3]:
            columns = await end.columns(kind.table)
            places = [columns.index(k) for k in kind.key]
            started, count, after = time.monotonic(), 0, None
            while rows := await end.rows(kind.table, columns, kind.key, after, 2000):
                count += len(rows)
                after = [rows[-1][i] for i in places]
            rates[kind.table] = count / (time.monotonic() - started)
    finally:
        await end.close()
    return rates


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--pg-url", default=PG)
    parser.add_argument("--redis-url", default=REDIS)
    args = parser.parse_args()
    schema = f"rw_bench_move_{uuid.uuid4().hex[:8]}"
    pg = f"{args.pg_url}?schema={schema}"
    redis_target = f"{args.redis_url}?namespace={schema}"
    with tempfile.TemporaryDirectory() as scratch:
        source, back = f"sqlite:///{scratch}/source.db", f"sqlite:///{scratch}/back.db"
        async with rw.App(source):
            pass  # the schema
        seed(f"{scratch}/source.db", args.runs, args.steps, args.events)
        try:
            for label, frm, to in (("sqlite -> postgres", source, pg), ("postgres -> sqlite", pg, back),
                                   ("sqlite -> redis", back, redis_target)):
                floor = await read_rate(frm)
                report = await move(frm, to)
                print(f"{label}: sealed {report.sealed_s:.2f} s for {report.rows:,} rows")
                for kind in report.kinds[:3]:
                    print(f"  {kind.table:<7} {kind.rows:>8,} rows  {kind.rows / kind.seconds:>9,.0f} rows/s"
                          f"   (bare read of the source: {floor[kind.table]:>9,.0f} rows/s)")
        finally:
            conn = await asyncpg.connect(args.pg_url)
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await conn.close()
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(args.redis_url)
            async for key in client.scan_iter(match=f"rw:{{{schema}}}:*", count=1000):
                await client.delete(key)
            await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
