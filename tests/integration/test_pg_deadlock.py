"""A deadlock is a blink on PostgreSQL: the victim's transaction was rolled back whole,
so the store raises StoreError (which every loop and finish retries), never asyncpg's
own error, which killed a worker's side task (found by `runwright verify` under faults).
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

import runwright as rw
from runwright.errors import StoreError
from runwright.store._params import (
    RunClaimParams,
    RunExtendParams,
    RunFinishParams,
    WorkerRegisterParams,
)

from ..conftest import PG_BASE


def _app(store_url: str) -> rw.App:
    app = rw.App(store_url)

    @app.task
    async def job(ctx: rw.Context) -> None: ...

    return app


async def _two_claimed(app: rw.App) -> tuple[int, list[rw.Run]]:
    """A worker's id and two runs it has claimed, in id order."""
    for n in range(2):
        await app.submit("job", key=f"k{n}")
    wid = await app.store.worker_register(WorkerRegisterParams("h", 1, ["default"], ["job"]))
    runs = await app.store.run_claim(RunClaimParams(wid, ["default"], ["job"], 2, 60))
    return wid, sorted(runs, key=lambda r: r.id)


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_deadlocked_renewal_is_a_store_error_and_the_retry_renews(store_url: str) -> None:
    app = _app(store_url)
    async with app:
        wid, runs = await _two_claimed(app)
        schema = store_url.split("schema=", 1)[1]
        other = await asyncpg.connect(PG_BASE)
        try:
            # The other session waits long before it checks for a deadlock: the store's
            # renewal, checking after the default 1 s, is the one PostgreSQL rolls back.
            await other.execute("SET deadlock_timeout = '30s'")
            async with other.transaction():
                await other.execute(f'SELECT 1 FROM "{schema}".runs WHERE id = $1 FOR UPDATE', runs[1].id)
                extend = asyncio.create_task(app.store.run_extend(RunExtendParams(
                    wid, [(r.id, r.fence) for r in runs], 60)))
                await asyncio.sleep(0.5)  # the renewal holds runs[0] and waits for runs[1]
                lock_first = asyncio.create_task(other.execute(
                    f'SELECT 1 FROM "{schema}".runs WHERE id = $1 FOR UPDATE', runs[0].id))
                with pytest.raises(StoreError, match="DeadlockDetected"):
                    await extend
                await lock_first
        finally:
            await other.close()
        renewed = await app.store.run_extend(RunExtendParams(wid, [(r.id, r.fence) for r in runs], 60))
        assert renewed.lost == []


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_finish_batch_locks_in_id_order_as_renewals_do(store_url: str) -> None:
    """A renewal (another session of the same worker) locks its runs in id order; a finish
    batch of the same runs, given in any order, must lock them in that order too, or the
    two deadlock (seen under load: the finish retried, the drain stalled a second)."""
    app = _app(store_url)
    async with app:
        wid, runs = await _two_claimed(app)
        schema = store_url.split("schema=", 1)[1]
        renewal = await asyncpg.connect(PG_BASE)
        try:
            await renewal.execute("SET deadlock_timeout = '30s'")  # the finish would be the victim
            async with renewal.transaction():
                # As a renewal does: the lower id first. The finish, given the higher id
                # first, must wait on the lower one rather than take the higher one.
                await renewal.execute(f'SELECT 1 FROM "{schema}".runs WHERE id = $1 FOR UPDATE', runs[0].id)
                finish = asyncio.create_task(app.store.run_finish_many([
                    RunFinishParams(run.id, run.fence, rw.RunState.SUCCEEDED, result="null")
                    for run in reversed(runs)]))
                await asyncio.sleep(0.5)
                await renewal.execute(f'SELECT 1 FROM "{schema}".runs WHERE id = $1 FOR UPDATE', runs[1].id)
            assert await finish == []  # none refused: both finished, no deadlock
        finally:
            await renewal.close()
        states = {run.id: run.state for run in await app.store.run_get_many([r.id for r in runs])}
        assert set(states.values()) == {rw.RunState.SUCCEEDED}
