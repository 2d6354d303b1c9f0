"""Store scenarios for queues paused fleet-wide (`pause-queue`): the set is the store's,
and every claim of the fleet skips a paused queue itself, so a worker that never heard of
the pause (stopped while it went out) claims nothing from it. Each runs on every backend."""

from __future__ import annotations

import asyncio

from runwright.runs import RunState
from runwright.store._params import QueuePauseParams, RunClaimParams, RunFinishParams, RunNextDueParams

from .helpers import T0, insert, worker

FLEET = "runwright:v0"


def claim_of(worker_id: int, fleet: str | None = FLEET, limit: int = 10,
             queues: tuple[str, ...] = ("emails", "default")) -> RunClaimParams:
    return RunClaimParams(worker_id, queues, ["t"], limit, 30.0, now=T0, fleet=fleet)


async def pause(store, queue: str, paused: bool = True, fleet: str = FLEET) -> bool:
    return await store.queue_set_paused(QueuePauseParams(fleet, queue, paused))


async def test_the_paused_set_is_kept_per_fleet(store):
    assert await store.queue_list_paused(FLEET) == set()
    assert await pause(store, "emails") is True
    assert await pause(store, "emails") is False  # already paused: nothing changed
    assert await pause(store, "reports") is True
    assert await store.queue_list_paused(FLEET) == {"emails", "reports"}
    assert await store.queue_list_paused("runwright:v1") == set()  # two majors, two fleets
    assert await pause(store, "emails", paused=False) is True
    assert await pause(store, "emails", paused=False) is False
    assert await store.queue_list_paused(FLEET) == {"reports"}


async def test_a_claim_skips_a_queue_its_fleet_paused_until_it_is_resumed(store):
    wid = await store.worker_register(worker())
    email, other = await store.run_insert_many([insert(queue="emails"), insert(queue="default")])
    await pause(store, "emails")
    assert [r.id for r in await store.run_claim(claim_of(wid))] == [other.id]
    assert await store.run_claim(claim_of(wid)) == []
    assert (await store.run_get(email.id)).state is RunState.QUEUED
    await pause(store, "emails", paused=False)
    assert [r.id for r in await store.run_claim(claim_of(wid))] == [email.id]


async def test_a_pause_holds_only_for_its_own_fleet(store):
    wid = await store.worker_register(worker())
    first, second = await store.run_insert_many([insert(queue="emails"), insert(queue="emails")])
    await pause(store, "emails")
    # Another major's fleet, and a claim in no fleet (tools, tests), are not held.
    assert [r.id for r in await store.run_claim(claim_of(wid, fleet="runwright:v1", limit=1))] == [first.id]
    assert [r.id for r in await store.run_claim(claim_of(wid, fleet=None))] == [second.id]


async def test_a_claim_along_with_finishes_skips_a_paused_queue_too(store):
    wid = await store.worker_register(worker())
    running, email, other = await store.run_insert_many(
        [insert(queue="default"), insert(queue="emails"), insert(queue="default")])
    (taken,) = await store.run_claim(claim_of(wid, limit=1, queues=("default",)))
    assert taken.id == running.id
    await pause(store, "emails")
    finish = RunFinishParams(taken.id, taken.fence, RunState.SUCCEEDED, result='"ok"', now=T0)
    finish.alone = True  # the one-statement path, where a store has one (PostgreSQL)
    refused, claimed = await store.run_finish_claim([finish], claim_of(wid))
    assert refused == [] and [r.id for r in claimed] == [other.id]
    assert (await store.run_get(email.id)).state is RunState.QUEUED


async def test_next_due_does_not_see_a_paused_queue(store):
    await store.run_insert_many([insert(queue="emails", run_at=T0 - 10),
                                 insert(queue="default", run_at=T0 + 5)])
    due = RunNextDueParams(["emails", "default"], ["t"], fleet=FLEET)
    assert await store.run_next_due_at(due) == T0 - 10
    await pause(store, "emails")
    assert await store.run_next_due_at(due) == T0 + 5
    assert await store.run_next_due_at(RunNextDueParams(["emails"], ["t"], fleet=FLEET)) is None
    assert await store.run_next_due_at(RunNextDueParams(["emails"], ["t"])) == T0 - 10


async def test_no_claim_begun_after_a_pause_was_written_takes_from_the_queue(store):
    """Claimers race a pause, many times: a claim that began after the pause's write
    returned never brings a run of the paused queue (one that began before may)."""
    wid = await store.worker_register(worker())
    for _round in range(5):
        await store.run_insert_many([insert(queue="emails") for _ in range(60)])
        paused_at: list[float] = []
        late: list[int] = []

        async def claimer() -> None:
            while True:
                began = asyncio.get_running_loop().time()
                runs = await store.run_claim(claim_of(wid, limit=1, queues=("emails",)))
                if paused_at and began > paused_at[0]:
                    late.extend(r.id for r in runs)
                    return
                if not runs:
                    return

        async def pauser() -> None:
            await asyncio.sleep(0.005)
            await pause(store, "emails")
            paused_at.append(asyncio.get_running_loop().time())

        await asyncio.gather(pauser(), *(claimer() for _ in range(8)))
        assert late == [], f"claims begun after the pause took {late}"
        await pause(store, "emails", paused=False)
        await store.run_claim(claim_of(wid, limit=200, queues=("emails",)))  # empty it for the next round
