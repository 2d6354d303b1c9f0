"""Submit benchmark: where a PostgreSQL submit's time goes, from the bare INSERT of the
shared harness's raw baseline up to `app.submit`, each layer measured in the same run.

    cd /work/main && .venv/bin/python -m benchmarks.submit [--singles 1500] [--rounds 5]
        [--batches 10] [--pg-url URL]

One at a time, `--singles` submits per layer and round, the layers taking turns round by
round so that the machine's load falls on all alike:

1. raw INSERT: the harness's raw single insert, `INSERT INTO jobs (payload) VALUES ($1)`
   prepared, into a table of two narrow indexes;
2. a runs row: one row of runwright's `runs` table as a submit writes it, alone (no key
   row, no event, no notification): what the table and its indexes cost;
3. INSERT_ONE: the statement a submit sends (the key row, the run, its first event, the
   notification), on a bare session with its values made beforehand;
4. the store: `store.run_insert_many([params])`, its params made beforehand;
5. app.submit: all of it (checks, encoding, the store, the handle).

Each prints the wall time per submit (median of the rounds), the client's and the
database server's CPU per submit (from /proc, see cpu.py), and the raw INSERT's wall time
as a share of it: the harness's "single / raw" figure, layer by layer.

In bulk, `--batches` of 1,000 (the harness's batch) per round: the raw `INSERT ... SELECT
unnest($1)`; the rows a submission writes alone (a batch's runs, their keys and their
`submitted` events, by one statement of three INSERT ... SELECT of values made
beforehand: none of INSERT_FRESH's JSON rows, RETURNING, join back to the input or
notification); `submit_many` on an open store; and the open of a fresh store
(connections, checks, the migration of a new schema). The harness's runwright adapter
times that open with its bulk enqueue (its clean() closes the app and drops the
database), so the figure "bulk, with the open" is the harness's; PgQueuer's adapter
installs its schema in clean(), outside the timing. "The rows alone, with the open" is
what any statement writing those rows could reach there.

It prints figures; it asserts nothing. PostgreSQL only: the layers are its statements.
Everything is written in a schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import asyncpg

import runwright as rw
from runwright.store._params import RunInsertParams
from runwright.store.postgres import _sql as sql
from runwright.store.postgres._store import PostgresStore, _insert_row  # the values INSERT_ONE takes
from runwright.tasks._limits import Limits
from runwright.tasks._submission import Submission, insert_params

from . import common
from .common import say
from .cpu import CpuSample, pg_backends

COUNTS = [
    common.Count("--singles", 1500, "submits per layer and round, one at a time", at_least=1),
    common.Count("--rounds", 5, "rounds (medians printed)", at_least=1),
    common.Count("--batches", 10, "batches of 1,000 per bulk round", at_least=1),
]
BATCH = 1000  # the harness's bulk batch
BARE_NAME = "runwright-bench-submit"  # the bare session's application_name: not the store's

RAW_TABLE = """
CREATE TABLE jobs (id bigserial PRIMARY KEY, payload bigint NOT NULL,
                   status smallint NOT NULL DEFAULT 0, picked_at timestamptz);
CREATE INDEX jobs_queued ON jobs (id) WHERE status = 0
"""
RAW_SINGLE = "INSERT INTO jobs (payload) VALUES ($1)"
RAW_BULK = "INSERT INTO jobs (payload) SELECT unnest($1::bigint[])"
# A batch's rows alone ($1: their keys, $2: now, $3: the event's data): what a submission
# must write, without the statement that writes it in the store.
ROWS_BULK = """
WITH numbered AS MATERIALIZED (
    SELECT nextval('runs_id_seq') AS id, key FROM unnest($1::text[]) AS key
), runs_rows AS (
    INSERT INTO runs (id, key, task, queue, priority, state, args, max_attempts, run_at,
                      created_at, last_seq)
    OVERRIDING SYSTEM VALUE
    SELECT id, key, 'noop', 'default', 2, 'queued', '{"i": 0}', 3, $2, $2, 1 FROM numbered
), key_rows AS (
    INSERT INTO run_keys (tenant, key, run_id) SELECT '', key, id FROM numbered
)
INSERT INTO events (run_id, seq, kind, data, at) SELECT id, 1, 'submitted', $3, $2 FROM numbered
"""
# A `submitted` event's data as long as the store's (its key is 32 hex digits).
SUBMITTED_DATA = json.dumps({"task": "noop", "key": "0" * 32, "queue": "default", "priority": 2,
                             "parent": None, "thread": None})
# The runs row of INSERT_ONE (its fields as $1..$16, `now` as $17), as a statement of its own.
_FIELDS = ", ".join(name for name, _ in sql.INSERT_FIELDS)
_VALUES = ", ".join(f"${i}" for i in range(1, len(sql.INSERT_FIELDS) + 2))
RUNS_ROW = f"INSERT INTO runs ({_FIELDS}, created_at, state, last_seq) VALUES ({_VALUES}, 'queued', 1)"


async def noop(i: int) -> None:
    return None


def with_tasks(target: rw.App) -> rw.App:
    target.task(noop)
    return target


@dataclass
class Layer:
    """One layer's rounds: per submit (or per run in bulk), wall µs, client CPU µs and
    database CPU µs."""

    label: str
    wall_us: list[float] = field(default_factory=list)
    client_us: list[float] = field(default_factory=list)
    db_us: list[float] = field(default_factory=list)


Pids = Callable[[], Awaitable[list[int]]]


async def timed(layer: Layer, count: int, db_pids: Pids, step: Callable[[int], Awaitable[Any]],
                per: int = 1) -> None:
    """Run `step(i)` for i in range(count), and add the round's figures per `per` runs
    a step makes to `layer`."""
    pids = await db_pids()
    db0, cpu0, t0 = CpuSample.of(pids), time.process_time(), time.perf_counter()
    for i in range(count):
        await step(i)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    runs = count * per
    layer.wall_us.append(1e6 * wall / runs)
    layer.client_us.append(1e6 * cpu / runs)
    layer.db_us.append(1e6 * CpuSample.of(pids).since(db0) / runs)


class Bench:
    """The benchmark's app on a fresh schema, and a bare session of its own in it."""

    def __init__(self, app: rw.App, schema: str, bare: asyncpg.Connection) -> None:
        store = app.store
        assert isinstance(store, PostgresStore)
        self.app, self.store = app, store
        self.schema = schema
        self.bare = bare
        self.spec = app.task_spec("noop")
        self.limits = Limits(app.max_payload_bytes)

    def params(self, count: int) -> list[RunInsertParams]:
        """`count` submits' params, as app.submit makes them, made before the clock runs."""
        return [insert_params(self.spec, self.spec.bind((), {"i": i}), Submission(), now_s=time.time(),
                              limits=self.limits, version=self.app.registry.version)
                for i in range(count)]

    async def bare_pid(self) -> list[int]:
        return [await self.bare.fetchval("SELECT pg_backend_pid()")]


async def single_round(bench: Bench, layers: dict[str, Layer], count: int, store_pids: Pids) -> None:
    """One round of every single-submit layer, in the order of the docstring."""
    raw = await bench.bare.prepare(RAW_SINGLE)
    await timed(layers["raw"], count, bench.bare_pid, lambda i: raw.fetch(i))

    channel = bench.store.channels["queued"]
    made = bench.params(count)
    rows = [_insert_row(p, p.now) for p in made]
    runs_row = await bench.bare.prepare(RUNS_ROW)
    await timed(layers["row"], count, bench.bare_pid, lambda i: runs_row.fetch(*rows[i], made[i].now))

    made = bench.params(count)
    rows = [_insert_row(p, p.now) for p in made]
    insert_one = await bench.bare.prepare(bench.store._sql(sql.INSERT_ONE))  # as the store sends it
    await timed(layers["insert_one"], count, bench.bare_pid,
                lambda i: insert_one.fetch(*rows[i], made[i].now, channel))

    made = bench.params(count)
    await timed(layers["store"], count, store_pids, lambda i: bench.store.run_insert_many([made[i]]))
    await timed(layers["submit"], count, store_pids, lambda i: bench.app.submit("noop", i=i))


async def bulk_round(bench: Bench, layers: dict[str, Layer], batches: int, store_pids: Pids,
                     open_fresh: Callable[[], Awaitable[float]]) -> None:
    """One round of the bulk layers: the raw batch insert, the rows alone, submit_many, a
    fresh open."""
    raw = await bench.bare.prepare(RAW_BULK)
    await timed(layers["raw_bulk"], batches, bench.bare_pid,
                lambda b: raw.fetch(list(range(b * BATCH, (b + 1) * BATCH))), per=BATCH)
    keys = [uuid.uuid4().hex for _ in range(batches * BATCH)]  # made before the clock runs
    rows = await bench.bare.prepare(ROWS_BULK)
    await timed(layers["rows_bulk"], batches, bench.bare_pid,
                lambda b: rows.fetch(keys[b * BATCH:(b + 1) * BATCH], time.time(), SUBMITTED_DATA),
                per=BATCH)
    items = [{"i": i} for i in range(BATCH)]
    await timed(layers["submit_many"], batches, store_pids,
                lambda _b: bench.app.submit_many("noop", items), per=BATCH)
    layers["open"].wall_us.append(await open_fresh())


async def fresh_open(pg_url: str, schema: str, notes: list[str]) -> float:
    """µs to open a store on a schema that does not exist yet (connections, checks,
    migration), as the harness's first bulk call does; the schema is dropped after (a
    failure to drop it becomes a note)."""
    app = with_tasks(rw.App(common.store_url("postgres", Path(), pg_url, schema)))
    t0 = time.perf_counter()
    try:
        await app.open()
        return 1e6 * (time.perf_counter() - t0)
    finally:
        await app.close()
        await common.drop_schema(pg_url, schema, notes)


SINGLE_LAYERS = [
    ("raw", "raw INSERT (the harness's, one table)"),
    ("row", "one runs row alone (no key, event, notify)"),
    ("insert_one", "INSERT_ONE on a bare session"),
    ("store", "store.run_insert_many([params])"),
    ("submit", "app.submit"),
]
BULK_LAYERS = [
    ("raw_bulk", "raw INSERT ... SELECT unnest, per run"),
    ("rows_bulk", "the rows alone (run, key, event), per run"),
    ("submit_many", "submit_many of 1,000, per run"),
]


async def main(args: argparse.Namespace) -> None:
    schema = f"bench_submit_{os.getpid()}"
    app = with_tasks(rw.App(common.store_url("postgres", Path(), args.pg_url, schema)))
    layers = {key: Layer(label) for key, label in SINGLE_LAYERS + BULK_LAYERS}
    layers["open"] = Layer("open a fresh store")
    notes: list[str] = []  # schemas left behind, printed at the end
    bare: asyncpg.Connection | None = None
    try:
        await app.open()
        bare = await asyncpg.connect(args.pg_url, server_settings={
            "search_path": schema, "application_name": BARE_NAME})
        await bare.execute(RAW_TABLE)
        bench = Bench(app, schema, bare)
        store_pids = pg_backends(args.pg_url, schema)
        for n in range(args.rounds):
            await single_round(bench, layers, args.singles, store_pids)
            await bulk_round(bench, layers, args.batches, store_pids,
                             lambda: fresh_open(args.pg_url, f"{schema}_open{n}", notes))
            submit, raw = layers["submit"].wall_us[-1], layers["raw"].wall_us[-1]
            say("postgres", f"round {n + 1} of {args.rounds}: submit {submit:.0f} µs, raw {raw:.0f} µs")
    finally:
        if bare is not None:
            await bare.close()
        await app.close()
        await common.drop_schema(args.pg_url, schema, notes)
        for note in notes:
            say("postgres", note)
    print()
    print(report(layers, args))


def heading(title: str, last: str) -> str:
    return f"{title:46}{'wall':>10}{'client CPU':>12}{'database CPU':>14}{last:>12}"


def rows(layers: dict[str, Layer], keys: list[tuple[str, str]], digits: int,
         last: Callable[[float], str]) -> list[str]:
    """A line a layer: its median wall, client and database µs, then `last(wall)`."""
    med = statistics.median
    out = []
    for key, _ in keys:
        layer = layers[key]
        wall = med(layer.wall_us)
        out.append(f"{layer.label:46}{wall:8.{digits}f} µs{med(layer.client_us):9.{digits}f} µs"
                   f"{med(layer.db_us):11.{digits}f} µs{last(wall)}")
    return out


def report(layers: dict[str, Layer], args: argparse.Namespace) -> str:
    med = statistics.median
    raw, raw_bulk = med(layers["raw"].wall_us), med(layers["raw_bulk"].wall_us)
    open_us = med(layers["open"].wall_us)
    runs: int = args.batches * BATCH

    def with_open(key: str) -> float:
        """Runs a second of `runs` written by layer `key` after the open, as the harness times it."""
        return runs / (runs * med(layers[key].wall_us) + open_us) * 1e6

    return "\n".join([
        f"PostgreSQL, {args.singles:,} single submits and {args.batches} batches of {BATCH:,} a round;"
        f" medians of {args.rounds} rounds",
        heading("single submit", "raw / this"),
        *rows(layers, SINGLE_LAYERS, 0, lambda wall: f"{100 * raw / wall:11.0f}%"),
        heading("bulk", "rate"),
        *rows(layers, BULK_LAYERS, 1, lambda wall: f"{1e6 / wall:10,.0f}/s"),
        f"{'open a fresh store (connect, check, migrate)':46}{open_us / 1000:8.1f} ms",
        f"{f'submit_many of {runs:,} with the open (harness)':46}{with_open('submit_many'):18,.0f}/s"
        f"   raw bulk: {1e6 / raw_bulk:,.0f}/s",
        f"{f'the rows alone, {runs:,} with the open':46}{with_open('rows_bulk'):18,.0f}/s",
    ])


if __name__ == "__main__":
    common.run_main(main(common.parse_benchmark_args(__doc__, COUNTS, backends=False)))
