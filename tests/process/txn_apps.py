"""The app that worker subprocesses load as `tests.process.txn_apps:app` for the proof that
a transactional step's write lands exactly once (test_transactions.py).

One task, `counted`, bumps a counter row keyed by its run in a table of the application's
own, in the store's database (on PostgreSQL in the test's schema, on SQLite in the same
file), then holds a moment (`hold_s`) before returning: the window in which a worker that
dies has written but not journaled. In `mode="transaction"` the bump is a transactional
step (`ctx.transaction`): the write and the step's journal entry commit together. In
`mode="step"` it is a plain `ctx.step` that writes through a connection of its own and
commits at once: nothing ties the write to the journal entry that follows.

With RUNWRIGHT_TEST_CRASH_P=p, a run arms, with probability p, a kill of its worker at one
of the engine's crash points around its bump (engine/_crashpoints.py): right after the
write and before the journal entry (`transaction.before_commit`, `step.after_side_effect`),
or right after the journal entry (`step.after_journal`). The process dies at the next bump
that reaches the point (this run's, or one of its neighbours').

Each write leaves a ledger line `wrote <run> <fence> <pid>` (apps.note) once made and
before the hold, so a test counts the runs whose bump was executed more than once: the
crash windows that landed, whether the write they made stayed or was rolled back.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from typing import Any

import asyncpg

import runwright as rw
from runwright.engine._crashpoints import arm

from .apps import note

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()

CRASH_P_ENV = "RUNWRIGHT_TEST_CRASH_P"
STEP = "bump"
BEFORE_JOURNAL = {"transaction": "transaction.before_commit", "step": "step.after_side_effect"}


def bump_sql(table: str) -> str:
    """Increment the run's counter (created at 1), answering the new count. `table` may be
    schema-qualified; the SET names it by its bare name. The same on both backends."""
    bare = table.split(".")[-1]
    return (f"INSERT INTO {table} (id, n) VALUES ($1, 1) ON CONFLICT (id) DO UPDATE "
            f"SET n = {bare}.n + 1 RETURNING n")


def _store_url() -> str:
    return os.environ["RUNWRIGHT_URL"]


def _maybe_arm(mode: str) -> None:
    p = float(os.environ.get(CRASH_P_ENV, "0") or 0)
    if p > 0 and random.random() < p:
        point = random.choice([BEFORE_JOURNAL[mode], "step.after_journal"])
        arm(f"{point}:{STEP}", "kill")


async def bump_in_transaction(tx: Any, ctx: rw.Context, table: str, hold_s: float) -> int:
    n = int(await tx.fetchval(bump_sql(table), str(ctx.run_id)))
    note("wrote", ctx)
    await asyncio.sleep(hold_s)
    return n


_pool: asyncpg.Pool | None = None
_pool_lock = asyncio.Lock()


async def _pg_pool() -> asyncpg.Pool:
    """This process's own small pool for the plain steps' writes (not the store's)."""
    global _pool
    async with _pool_lock:
        if _pool is None:
            dsn = _store_url().split("?", 1)[0]
            _pool = await asyncpg.create_pool(dsn, min_size=0, max_size=1,
                                              server_settings={"application_name": "txn-proof-plain"})
    return _pool


def _sqlite_bump(path: str, sql: str, key: str) -> int:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        ((n,),) = conn.execute(sql.replace("$1", "?1"), (key,)).fetchall()
        conn.execute("COMMIT")
        return int(n)
    finally:
        conn.close()


async def bump_apart(ctx: rw.Context, table: str, hold_s: float) -> int:
    """The same increment through a connection of its own, committed at once."""
    url, key = _store_url(), str(ctx.run_id)
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):].split("?", 1)[0]
        n = await asyncio.to_thread(_sqlite_bump, path, bump_sql(table), key)
    else:
        pool = await _pg_pool()
        async with pool.acquire() as conn:
            n = int(await conn.fetchval(bump_sql(table), key))
    note("wrote", ctx)
    await asyncio.sleep(hold_s)
    return n


@app.task(retries=3, backoff=rw.Backoff(base_s=0.05))
async def counted(ctx: rw.Context, mode: str, table: str, hold_s: float) -> int:
    """Bump the run's counter once (as far as the run knows): the count it saw."""
    _maybe_arm(mode)
    if mode == "transaction":
        n: int = await ctx.transaction(STEP, bump_in_transaction, ctx, table, hold_s)
    else:
        n = await ctx.step(STEP, bump_apart, ctx, table, hold_s)
    return n
