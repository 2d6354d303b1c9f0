"""PostgreSQL schema 16 moved the key index off runs into run_keys: a schema 15 store
that already holds keyed runs keeps every key after the migration, so a submission
repeated across the upgrade still returns the run it made, and a new key a new run."""

from __future__ import annotations

import asyncpg
import pytest

from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._params import RunClaimParams, RunFinishParams, RunInsertParams, WorkerRegisterParams

from ..conftest import PG_BASE

KEYS_TABLE = 16  # the schema version that keeps keys in run_keys


def _insert(key: str, tenant: str | None = None) -> RunInsertParams:
    return RunInsertParams(key=key, task="t", args="{}", tenant=tenant)


async def _schema_15_with_runs(store_url: str, schema: str) -> None:
    """Migrate to 15 only, then write runs the way schema 15's submission did."""
    older = store_from_url(store_url)
    older.migrations = older.migrations[:KEYS_TABLE - 1]  # type: ignore[attr-defined]
    older.schema_version_known = KEYS_TABLE - 1  # type: ignore[misc]
    await older.open()
    try:
        assert await older.migrate() == list(range(1, KEYS_TABLE))
    finally:
        await older.close()
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.executemany(
            f'INSERT INTO "{schema}".runs (key, task, queue, priority, state, args, max_attempts,'
            " run_at, created_at, tenant, last_seq) VALUES ($1, 't', 'default', 2, 'queued', '{}', 3,"
            " 0, 0, $2, 0)", [("before", None), ("before", "acme"), ("finished", None)])
    finally:
        await conn.close()


@pytest.mark.parametrize("backend", ["postgres"])
async def test_keys_written_before_the_run_keys_table_still_dedupe(store_url: str) -> None:
    schema = store_url.rpartition("schema=")[2]
    await _schema_15_with_runs(store_url, schema)
    store = store_from_url(store_url)
    await store.open()
    try:
        # 16, and every step after it
        assert await store.migrate() == list(range(KEYS_TABLE, len(store.migrations) + 1))  # type: ignore[attr-defined]
        again, tenants, new = await store.run_insert_many(
            [_insert("before"), _insert("before", "acme"), _insert("after")])
        assert again.existed and tenants.existed and not new.existed
        assert again.id != tenants.id, "one key names one run per tenant, as before"
        assert (again.tenant, tenants.tenant) == (None, "acme")

        wid = await store.worker_register(WorkerRegisterParams("h", 1, ["default"], ["t"]))
        claimed = await store.run_claim(RunClaimParams(wid, ["default"], ["t"], 10, 60))
        assert len(claimed) == 4, "the runs schema 15 wrote are claimed beside the new one"
        assert await store.run_finish_many(
            [RunFinishParams(r.id, r.fence, RunState.SUCCEEDED) for r in claimed]) == []
        (finished,) = await store.run_insert_many([_insert("finished")])
        assert finished.existed and finished.state is RunState.SUCCEEDED
    finally:
        await store.close()
