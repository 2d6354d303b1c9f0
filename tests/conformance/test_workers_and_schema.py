"""Worker registry, notifications and schema versions, on every backend."""

from __future__ import annotations

import asyncio
import os

import pytest

from runwright.errors import SchemaError
from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._hub import CANCEL, QUEUED, done_topic
from runwright.store._params import RunCancelParams, RunCountParams, RunFinishParams, WorkerHeartbeatParams

from .helpers import T0, claim, insert, stamp_schema, worker


async def test_register_heartbeat_list_and_deregister(store):
    first = await store.worker_register(worker(now=T0))
    second = await store.worker_register(worker(now=T0))
    assert first != second
    assert await store.worker_heartbeat(WorkerHeartbeatParams(first, now=T0 + 3))
    listed = {w.id: w for w in await store.worker_list()}
    assert listed[first].heartbeat_at == T0 + 3 and listed[first].tasks == ["t"]
    await store.worker_deregister(first)
    assert [w.id for w in await store.worker_list()] == [second]
    assert not await store.worker_heartbeat(WorkerHeartbeatParams(first))


async def test_notifications_reach_another_connection(store, store_url):
    other = store_from_url(store_url)
    await other.open()
    try:
        await other.listen()
        wid = await store.worker_register(worker())
        with other.hub.watch(QUEUED) as queued:
            await store.run_insert_many([insert()])
            await asyncio.wait_for(queued.wait(), 10)
        (run,) = await store.run_claim(claim(wid))
        with other.hub.watch(done_topic(run.id)) as done:
            await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED,
                                                         result="1", now=T0)])
            await asyncio.wait_for(done.wait(), 10)
    finally:
        await other.close()


async def test_a_worker_listening_without_runs_hears_work_and_cancels_and_widens(store, store_url):
    """A worker listens without runs' ends and log growth (every claim and finish sends
    them): it still hears due work and cancels; a follower in its process widens that,
    and hears a run's end from then on."""
    other = store_from_url(store_url)
    await other.open()
    try:
        await other.listen(runs=False)
        wid = await store.worker_register(worker())
        with other.hub.watch(QUEUED) as queued:
            await store.run_insert_many([insert()])
            await asyncio.wait_for(queued.wait(), 10)
        (run,) = await store.run_claim(claim(wid))
        with other.hub.watch(CANCEL) as cancel:
            await store.run_cancel(RunCancelParams(run.id))
            await asyncio.wait_for(cancel.wait(), 10)
        await other.listen()
        with other.hub.watch(done_topic(run.id)) as done:
            await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.CANCELLED, now=T0)])
            await asyncio.wait_for(done.wait(), 10)
    finally:
        await other.close()


async def test_a_store_closed_and_opened_again_works_as_before(store):
    """A process that closes its store (a test, a CLI command, a server's lifespan) and
    opens it again gets a working store: reads, fenced writes and notifications."""
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert()])
    for _ in range(2):
        await store.close()
        await store.open()
    await store.listen()
    with store.hub.watch(QUEUED) as queued:
        await store.run_insert_many([insert()])
        await asyncio.wait_for(queued.wait(), 10)
    runs = await store.run_claim(claim(wid))
    assert len(runs) == 2
    assert await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.SUCCEEDED, result="1",
                                                        now=T0) for r in runs]) == []
    assert await store.run_count_by_state(RunCountParams()) == {"succeeded": 2}


async def test_migrate_is_idempotent_and_records_the_version(store):
    assert await store.migrate() == []
    assert await store.schema_version() == store.schema_version_known >= 1


async def test_a_newer_schema_is_refused_and_nothing_is_written(store, store_url):
    newer = store.schema_version_known + 1
    await stamp_schema(store, newer)  # what a newer runwright would have written
    before = await store.run_count_by_state(RunCountParams())
    late = store_from_url(store_url)
    with pytest.raises(SchemaError, match="newer than this runwright knows"):
        await late.open()
    await late.close()
    with pytest.raises(SchemaError):
        await store.migrate()
    assert await store.run_count_by_state(RunCountParams()) == before == {}


async def test_more_calls_at_once_than_a_connection_pool_holds_all_answer(store):
    # A worker with hundreds of runs in flight makes that many store calls at once: they
    # wait for a connection, none fails for want of one (redis-py's default pool raises
    # past 100).
    (run,) = await store.run_insert_many([insert()])
    read = await asyncio.gather(*(store.run_get(run.id) for _ in range(300)))
    assert {r.id for r in read} == {run.id} and len(read) == 300


async def test_opening_without_create_makes_no_store_and_reads_as_no_schema(store_url):
    """What a reader (`runwright status`) does: open with create=False. A store never
    migrated is a SchemaError, on opening (SQLite: no file) or on the schema check (a
    server's database exists), and afterwards it is as absent as before: SQLite has no
    file, and a normal open then migrate still creates the schema."""
    reader = store_from_url(store_url)
    try:
        await reader.open(create=False)
        with pytest.raises(SchemaError):
            await reader.require_schema()
    except SchemaError as exc:
        assert store_url.startswith("sqlite:") and "no such database at" in str(exc)
    finally:
        await reader.close()
    if store_url.startswith("sqlite:"):
        assert not os.path.exists(store_url.removeprefix("sqlite:///"))
    writer = store_from_url(store_url)
    await writer.open()
    try:
        assert await writer.migrate() == list(range(1, writer.schema_version_known + 1))
        await writer.require_schema()
    finally:
        await writer.close()
    again = store_from_url(store_url)
    await again.open(create=False)  # now it exists: a reader opens it
    try:
        await again.require_schema()
    finally:
        await again.close()
