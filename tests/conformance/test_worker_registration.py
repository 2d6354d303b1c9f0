"""Only a registered worker claims, on every backend: a worker whose registration was
removed (declared dead while it was in fact still running, or deregistered) takes nothing,
its heartbeat tells it so, and once it registers again it claims as before."""

from __future__ import annotations

from runwright.runs import RunState
from runwright.store._params import RunFinishParams, WorkerHeartbeatParams

from .helpers import T0, claim, insert, worker


async def test_a_worker_never_registered_claims_nothing(store):
    (run,) = await store.run_insert_many([insert()])
    registered = await store.worker_register(worker())
    assert await store.run_claim(claim(registered + 1000)) == []
    assert (await store.run_get(run.id)).state is RunState.QUEUED
    (claimed,) = await store.run_claim(claim(registered))
    assert claimed.id == run.id and claimed.owner == registered


async def test_a_worker_whose_registration_was_removed_claims_nothing_until_it_registers_again(store):
    first, second = await store.run_insert_many([insert(), insert()])
    wid = await store.worker_register(worker())
    (claimed,) = await store.run_claim(claim(wid, limit=1))
    assert claimed.id == first.id
    await store.worker_deregister(wid)  # as a rescuer that declared it dead deletes its row

    assert await store.run_claim(claim(wid, now=T0 + 1)) == []
    # A finish still lands (its fence is current); the claim riding along takes nothing.
    refused, taken = await store.run_finish_claim(
        [RunFinishParams(claimed.id, claimed.fence, RunState.SUCCEEDED, result="1", now=T0 + 1)],
        claim(wid, now=T0 + 1))
    assert refused == [] and taken == []
    assert (await store.run_get(second.id)).state is RunState.QUEUED
    # Its heartbeat tells it that it was declared dead: it registers again, then claims.
    assert not await store.worker_heartbeat(WorkerHeartbeatParams(wid, now=T0 + 2))
    again = await store.worker_register(worker(now=T0 + 2))
    assert again != wid
    assert await store.worker_heartbeat(WorkerHeartbeatParams(again, now=T0 + 2))
    (retaken,) = await store.run_claim(claim(again, now=T0 + 2))
    assert retaken.id == second.id and retaken.owner == again
