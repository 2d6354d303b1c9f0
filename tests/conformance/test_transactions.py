"""A transactional step, as every store gives it (or refuses it): the application's writes
and the step's journal entry commit together, under the claim's fence, or not at all."""

from __future__ import annotations

import pytest

from runwright.errors import LeaseLost, TransactionsUnsupported
from runwright.runs import RunState
from runwright.store._params import RunRescueParams, StepRecordParams

from .helpers import T0, claim, insert, worker


def table(store) -> str:
    """The application's table, in the test's own schema on PostgreSQL (beside runwright's
    tables, as a deployment may keep them), in the file on SQLite."""
    schema = getattr(store, "schema", None)
    return f'"{schema}".app_rows' if schema else "app_rows"


# The stores that keep a SQL transaction (the `backend` fixture's parameters); Redis
# refuses one (its own test).
ON_SQL = pytest.mark.parametrize("backend", ["sqlite", "memory", "postgres"])


async def rows(store) -> list[str]:
    """The application's rows, read in a transaction that is rolled back (no record)."""
    async with store.step_transaction() as held:
        found = await held.connection.fetch(f"SELECT note FROM {table(store)} ORDER BY note")
    return [row[0] for row in found]


async def claimed_run(store, now: float = T0):
    wid = await store.worker_register(worker(now=now))
    await store.run_insert_many([insert(now=now)])
    (run,) = await store.run_claim(claim(wid, now=now))
    return run


@pytest.mark.parametrize("backend", ["redis"])
async def test_redis_refuses_a_transaction_saying_what_to_use(store):
    with pytest.raises(TransactionsUnsupported, match="needs a SQL store: .* use PostgreSQL or SQLite"):
        store.step_transaction()


@ON_SQL
async def test_the_writes_and_the_entry_commit_together_and_a_replay_writes_nothing(store):
    run = await claimed_run(store)
    async with store.step_transaction() as held:
        await held.connection.execute(f"CREATE TABLE {table(store)} (note TEXT PRIMARY KEY)")
        await held.connection.execute(f"INSERT INTO {table(store)} VALUES ($1)", "first")
        held.record = StepRecordParams(run.id, run.fence, 0, "charge", "done", '"ok"', now=T0)
    (step,) = await store.step_list(run.id)
    assert (step.position, step.name, step.status, step.result) == (0, "charge", "done", '"ok"')
    # A block with no record (a replay of a committed step): its writes roll back.
    async with store.step_transaction() as held:
        await held.connection.execute(f"INSERT INTO {table(store)} VALUES ($1)", "replayed")
    assert await rows(store) == ["first"]
    # A body that raises: nothing of it lands, the journal is as it was.
    with pytest.raises(ZeroDivisionError):
        async with store.step_transaction() as held:
            await held.connection.execute(f"INSERT INTO {table(store)} VALUES ($1)", "failed")
            held.record = StepRecordParams(run.id, run.fence, 1, "next", "done", "1", now=T0)
            raise ZeroDivisionError
    assert await rows(store) == ["first"] and len(await store.step_list(run.id)) == 1


@ON_SQL
async def test_a_superseded_claims_transaction_is_refused_and_writes_nothing(store):
    """A worker stopped mid-run wakes into a changed world: its run was taken over (a new
    claim, a new fence). Its transaction's writes never land, and it learns LeaseLost."""
    run = await claimed_run(store)
    async with store.step_transaction() as held:
        await held.connection.execute(f"CREATE TABLE {table(store)} (note TEXT PRIMARY KEY)")
        held.record = StepRecordParams(run.id, run.fence, 0, "setup", "done", "null", now=T0)
    # The lease lapses; the rescuer gives the run back and another worker claims it.
    later = T0 + 3600
    await store.run_rescue_many(RunRescueParams(now=later))
    (taken,) = await store.run_claim(claim(await store.worker_register(worker(now=later)), now=later))
    assert taken.id == run.id and taken.fence > run.fence and taken.state is RunState.RUNNING
    with pytest.raises(LeaseLost):
        async with store.step_transaction() as held:
            await held.connection.execute(f"INSERT INTO {table(store)} VALUES ($1)", "zombie")
            held.record = StepRecordParams(run.id, run.fence, 1, "charge", "done", "1", now=later)
    assert await rows(store) == []
    assert [s.position for s in await store.step_list(run.id)] == [0]
    # The new owner's transaction at the same position commits.
    async with store.step_transaction() as held:
        await held.connection.execute(f"INSERT INTO {table(store)} VALUES ($1)", "owner")
        held.record = StepRecordParams(run.id, taken.fence, 1, "charge", "done", "1", now=later)
    assert await rows(store) == ["owner"]
