"""A fork is a new run whose journal begins as a copy of another run's first entries, made
in one write with its insert: the copy is exactly the original's entries below the stop,
the fork links back (`forked_from`) and is listed among the original's forks, a bad stop
or another tenant's run writes nothing, and one key makes one fork however many ask."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from runwright.errors import InvalidInput, RunNotFound
from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._params import (
    EventListParams,
    RunFinishParams,
    RunForkParams,
    RunListParams,
    RunReclaimParams,
    StepRecordParams,
)

from .helpers import T0, claim, insert, step_record, worker

# The original's journal: (name, status). A failed step last, as a run that ended on it.
JOURNAL = [("fetch", "done"), ("snapshot", "done"), ("plan", "done"), ("charge", "started"),
           ("notify", "done"), ("plan", "done"), ("ship", "failed")]


async def failed_run(store, tenant: str | None = None):
    """A run that journaled JOURNAL and then ended failed."""
    wid = await store.worker_register(worker())
    first = insert()
    first.tenant = tenant
    (run,) = await store.run_insert_many([first])
    (run,) = await store.run_claim(claim(wid, limit=1))
    for position, (name, status) in enumerate(JOURNAL):
        assert await step_record(store, StepRecordParams(
            run.id, run.fence, position, name, status,
            result=f'"{name}-{position}"' if status == "done" else None,
            error='{"type": "E"}' if status == "failed" else None, now=T0 + position))
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.FAILED,
                                                        error='{"type": "E"}', now=T0 + 10)]) == []
    return await store.run_get(run.id)


def fork_of(run, from_step, key: str | None = None, tenant: str | None = None, args: str | None = None):
    made = insert(key=key)
    made.task, made.args, made.tenant = run.task, args or run.args, tenant
    return RunForkParams(run.id, from_step, made)


def copied(journal, run_id: int):
    """The original's entries as the fork's (its run id): everything else is kept."""
    return [dataclasses.replace(record, run_id=run_id) for record in journal]


@pytest.mark.parametrize("from_step, stop", [(0, 0), (2, 2), (4, 4), (7, 7), ("plan", 2),
                                             ("ship", 6), ("fetch", 0), ("snapshot", 1)])
async def test_a_fork_holds_the_originals_first_entries_and_links_back(store, from_step, stop):
    original = await failed_run(store)
    journal = await store.step_list(original.id)
    fork = await store.run_fork(fork_of(original, from_step, args='{"x":2}'))
    assert not fork.existed and fork.id != original.id
    assert (fork.state, fork.attempt, fork.fence, fork.forked_from, fork.args) == (
        RunState.QUEUED, 0, 1, original.id, '{"x":2}')
    assert fork == await store.run_get(fork.id)
    assert await store.step_list(fork.id) == copied(journal[:stop], fork.id)
    # A resume reads from the last copied snapshot on, as the fork's own would.
    resumable = await store.step_list_resumable(fork.id)
    assert resumable == (copied(journal[1:stop], fork.id) if stop > 1 else copied(journal[:stop], fork.id))
    events = await store.event_list(EventListParams(fork.id, 0, 10))
    assert [e.kind for e in events] == ["submitted", "forked"]
    assert events[1].data == {"from_run": original.id, "from_step": stop, "copied": stop}
    assert fork.last_seq == 2
    # The original is as it was, and lists its fork.
    assert await store.step_list(original.id) == journal
    assert (await store.run_get(original.id)).state is RunState.FAILED
    assert [run.id for run in await store.run_list(RunListParams(forked_from=original.id))] == [fork.id]
    assert await store.run_list(RunListParams(forked_from=fork.id)) == []


async def test_forks_list_newest_first_and_a_fork_forks_again(store):
    original = await failed_run(store)
    first = await store.run_fork(fork_of(original, 2))
    second = await store.run_fork(fork_of(original, "ship"))
    again = await store.run_fork(fork_of(first, 1))
    listed = await store.run_list(RunListParams(forked_from=original.id))
    assert [run.id for run in listed] == [second.id, first.id]
    assert again.forked_from == first.id
    assert [r.name for r in await store.step_list(again.id)] == ["fetch"]


@pytest.mark.parametrize("from_step, words", [
    (8, r"from_step=8 is past the end of run \d+'s journal \(it holds positions 0 to 6: fork from 0 to 7\)"),
    (-1, r"from_step=-1 is past the end"),
    ("refund", r"from_step='refund': run \d+ journaled no step of that name"),
])
async def test_a_stop_past_the_journal_or_an_unknown_name_writes_nothing(store, from_step, words):
    original = await failed_run(store)
    with pytest.raises(InvalidInput, match=words):
        await store.run_fork(fork_of(original, from_step, key="taken?"))
    assert await store.run_list(RunListParams(forked_from=original.id)) == []
    (run,) = await store.run_insert_many([insert(key="taken?")])
    assert not run.existed  # the key was not taken


async def test_another_tenants_run_is_no_run_to_fork(store):
    original = await failed_run(store, tenant="alice")
    for tenant in ("bob", None):
        with pytest.raises(RunNotFound, match=f"run {original.id} not found"):
            await store.run_fork(fork_of(original, 1, key="k-bob", tenant=tenant))
    with pytest.raises(RunNotFound, match="run 999999 not found"):
        await store.run_fork(RunForkParams(999999, 0, insert()))
    assert await store.run_list(RunListParams(forked_from=original.id)) == []
    fork = await store.run_fork(fork_of(original, 1, tenant="alice"))
    assert (fork.tenant, fork.forked_from) == ("alice", original.id)


async def test_a_run_of_a_thread_is_not_forked(store):
    threaded = insert()
    threaded.thread, threaded.on_busy = "t", "enqueue"
    run = await store.run_insert_threaded(threaded)
    with pytest.raises(InvalidInput, match="a run of a thread cannot be forked"):
        await store.run_fork(fork_of(run, 0))


async def test_a_fork_of_a_live_run_copies_what_it_journaled(store):
    """A running run may be forked: the copy is its journal as of the fork."""
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([insert()])
    (run,) = await store.run_claim(claim(wid, limit=1))
    assert await step_record(store, StepRecordParams(run.id, run.fence, 0, "a", "done", result="1"))
    with pytest.raises(InvalidInput, match="it holds positions 0 to 0: fork from 0 to 1"):
        await store.run_fork(fork_of(run, 2))
    fork = await store.run_fork(fork_of(run, 1))
    assert [r.name for r in await store.step_list(fork.id)] == ["a"]
    assert (await store.run_get(run.id)).state is RunState.RUNNING


async def test_one_key_makes_one_fork(store, store_url):
    """The same fork asked again returns the first (`existed`, nothing copied twice), and
    so do forks with one key racing on connections of their own."""
    original = await failed_run(store)
    fork = await store.run_fork(fork_of(original, 3, key="fork-1"))
    again = await store.run_fork(fork_of(original, 5, key="fork-1"))
    assert again.existed and again.id == fork.id
    assert len(await store.step_list(fork.id)) == 3
    others = [store_from_url(store_url) for _ in range(4)]
    for other in others:
        await other.open()
    try:
        forks = await asyncio.gather(*(other.run_fork(fork_of(original, 4, key="fork-2"))
                                       for other in others))
    finally:
        for other in others:
            await other.close()
    assert len({run.id for run in forks}) == 1 and sum(not run.existed for run in forks) == 1
    assert len(await store.step_list(forks[0].id)) == 4
    assert len(await store.event_list(EventListParams(forks[0].id, 0, 10))) == 2
    assert len(await store.run_list(RunListParams(forked_from=original.id))) == 2


async def test_a_fork_removed_by_retention_leaves_its_originals_list(store):
    """Forks are listed from what the store keeps of them: a fork retention removed is no
    longer listed; a removed original's kept forks still name it, and are listed by it
    (its id reads as reclaimed)."""
    original = await failed_run(store)
    kept, doomed = [await store.run_fork(fork_of(original, 1)) for _ in range(2)]
    wid = await store.worker_register(worker())
    claimed = await store.run_claim(claim(wid, limit=5, now=T0 + 20))
    assert sorted(run.id for run in claimed) == sorted([kept.id, doomed.id])
    (ended,) = [run for run in claimed if run.id == doomed.id]
    assert await store.run_finish_many([RunFinishParams(ended.id, ended.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 21)]) == []
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 30, run_ids=[doomed.id]))).run_ids \
        == [doomed.id]
    assert [run.id for run in await store.run_list(RunListParams(forked_from=original.id))] == [kept.id]
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 30, run_ids=[original.id]))).run_ids \
        == [original.id]
    assert [run.id for run in await store.run_list(RunListParams(forked_from=original.id))] == [kept.id]
    assert (await store.run_get(kept.id)).forked_from == original.id
    assert await store.run_was_reclaimed(original.id)
