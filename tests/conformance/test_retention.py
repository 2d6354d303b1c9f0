"""Retention in the store, on every backend: ended runs older than the cut-off go with
their journal, log and questions; nothing open or young is touched; a reclaimed id is
remembered as reclaimed; one holder at a time has the sweep's lease."""

from __future__ import annotations

import json

from runwright.runs import RunState
from runwright.store._params import (
    EventListParams,
    LeaseTakeParams,
    QuestionListParams,
    QuestionOpenParams,
    RunCountParams,
    RunFinishParams,
    RunReclaimParams,
    StepRecordParams,
)

from .helpers import T0, claim, insert, step_record, worker


async def _ended(store, wid: int, count: int, at: float, state: RunState = RunState.SUCCEEDED) -> list[int]:
    await store.run_insert_many([insert() for _ in range(count)])
    runs = await store.run_claim(claim(wid, limit=count, now=at))
    for run in runs:
        assert await step_record(store, StepRecordParams(run.id, run.fence, 0, "s", "done", "1", now=at))
        await store.question_open(QuestionOpenParams(run.id, run.fence, 1, "question",
                                                     json.dumps({"text": "?"}), now=at))
    assert await store.run_finish_many([RunFinishParams(r.id, r.fence, state, result="1", now=at)
                                        for r in runs]) == []
    return [r.id for r in runs]


async def test_a_removed_runs_key_is_free_and_a_kept_runs_key_still_dedupes(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert("old-key", now=T0), insert("kept-key", now=T0)])
    old, kept = await store.run_claim(claim(wid, limit=2, now=T0))
    assert await store.run_finish_many([RunFinishParams(old.id, old.fence, RunState.SUCCEEDED, now=T0)]) == []
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))).run_ids == [old.id]

    again, still = await store.run_insert_many([insert("old-key", now=T0 + 200),
                                                insert("kept-key", now=T0 + 200)])
    assert not again.existed and again.id > kept.id, "a removed run's key names a new run"
    assert still.existed and still.id == kept.id


async def test_old_ended_runs_go_with_their_journal_and_log_and_nothing_else(store):
    wid = await store.worker_register(worker())
    old = await _ended(store, wid, 3, T0)
    old_dead = await _ended(store, wid, 1, T0 + 1, RunState.DEAD)
    (open_run,) = await store.run_insert_many([insert(now=T0)])  # old, but queued
    young = await _ended(store, wid, 2, T0 + 500)

    dry = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100, dry_run=True))
    assert dry.run_ids == [*old, *old_dead] and (dry.steps, dry.events) == (4, 20)
    assert len(await store.run_get_many(old)) == 3, "a dry run removes nothing"

    gone = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))
    assert gone.run_ids == [*old, *old_dead] and (gone.steps, gone.events) == (4, 20)
    for run_id in gone.run_ids:
        assert await store.run_get(run_id) is None
        assert await store.step_list(run_id) == []
        assert await store.event_list(EventListParams(run_id)) == []
        assert await store.question_list(QuestionListParams(run_id=run_id, pending=False)) == []
        assert await store.run_was_reclaimed(run_id)
    assert {r.id for r in await store.run_get_many([open_run.id, *young])} == {open_run.id, *young}
    assert await store.run_count_by_state(RunCountParams()) == {"queued": 1, "succeeded": 2}
    assert not await store.run_was_reclaimed(young[0]) and not await store.run_was_reclaimed(open_run.id)
    assert not await store.run_was_reclaimed(10**12), "an id past every run was never reclaimed"
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))).run_ids == []


async def test_a_reclaim_is_bounded_and_the_next_one_goes_on(store):
    wid = await store.worker_register(worker())
    ids = await _ended(store, wid, 7, T0)
    first = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 1, limit=3))
    second = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 1, limit=3))
    third = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 1, limit=3))
    assert first.run_ids + second.run_ids + third.run_ids == ids
    assert [len(first.run_ids), len(second.run_ids), len(third.run_ids)] == [3, 3, 1]
    assert all([await store.run_was_reclaimed(i) for i in ids])


async def test_a_reclaim_of_named_runs_takes_only_those_that_ended(store):
    # What `runwright verify --fleet` removes of its own in the user's store: its runs, none else.
    wid = await store.worker_register(worker())
    mine = await _ended(store, wid, 3, T0)
    others = await _ended(store, wid, 2, T0)
    (open_run,) = await store.run_insert_many([insert(now=T0)])
    gone = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100,
                                                    run_ids=[*mine, open_run.id, 10**9]))
    assert gone.run_ids == mine and (gone.steps, gone.events) == (3, 15)
    assert await store.run_get_many(mine) == []
    assert all([await store.run_was_reclaimed(i) for i in mine])
    assert {r.id for r in await store.run_get_many([*others, open_run.id])} == {*others, open_run.id}
    rest = await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))
    assert rest.run_ids == others, "retention's own pass still finds everyone else's"


async def test_one_holder_at_a_time_has_a_lease_until_it_lapses(store):
    assert await store.lease_take(LeaseTakeParams("sweep", "a", 10, now=T0))
    assert not await store.lease_take(LeaseTakeParams("sweep", "b", 10, now=T0 + 5))
    assert await store.lease_take(LeaseTakeParams("sweep", "a", 10, now=T0 + 5)), "renewed by its holder"
    assert not await store.lease_take(LeaseTakeParams("sweep", "b", 10, now=T0 + 14))
    assert await store.lease_take(LeaseTakeParams("sweep", "b", 10, now=T0 + 15.5)), "lapsed: taken"
    assert not await store.lease_take(LeaseTakeParams("sweep", "a", 10, now=T0 + 16))
    assert await store.lease_take(LeaseTakeParams("other", "a", 10, now=T0 + 16)), "leases are by name"


async def test_a_run_id_is_never_given_twice_even_once_the_newest_run_was_reclaimed(store):
    wid = await store.worker_register(worker())
    ids = await _ended(store, wid, 3, T0)
    await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))
    (newer,) = await store.run_insert_many([insert(now=T0 + 200)])
    assert newer.id > max(ids), "a new run never takes the id of a reclaimed one"
    for run_id in ids:
        found = await store.run_get(run_id)
        assert found is None or found.id == run_id and found.state is RunState.SUCCEEDED
    await store.run_claim(claim(wid, now=T0 + 200))


async def test_a_thread_keeps_its_newest_runs_and_its_history(store):
    from runwright.store._params import (
        RunInsertParams,
        ThreadAppendParams,
        ThreadMessagesParams,
        ThreadRunReclaimParams,
    )

    def threaded(key: str, thread: str = "t", tenant: str | None = None) -> RunInsertParams:
        return RunInsertParams(key=key, task="t", args="{}", thread=thread, on_busy="enqueue",
                               tenant=tenant, now=T0)

    wid = await store.worker_register(worker())
    ended = []
    for i in range(4):  # four ended runs of "t", each adding a message
        await store.run_insert_threaded(threaded(f"t{i}"))
        (run,) = await store.run_claim(claim(wid))
        await store.thread_append(ThreadAppendParams(run.id, run.fence, "t", 0, json.dumps(i), now=T0))
        await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1",
                                                     now=T0)])
        ended.append(run.id)
    queued = await store.run_insert_threaded(threaded("t-open"))
    other = [(await store.run_insert_threaded(threaded(f"x{i}", tenant="x"))).id for i in range(2)]
    unthreaded = await _ended(store, wid, 1, T0)

    dry = await store.thread_run_reclaim(ThreadRunReclaimParams(keep=2, dry_run=True))
    assert dry.run_ids == ended[:3] and dry.events == 9
    assert len(await store.run_get_many(ended)) == 4, "a dry run removes nothing"
    gone = await store.thread_run_reclaim(ThreadRunReclaimParams(keep=2))
    assert gone.run_ids == ended[:3], "all but the newest 2 (the open one counts), the ended ones"
    for run_id in gone.run_ids:
        assert await store.run_get(run_id) is None and await store.run_was_reclaimed(run_id)
    kept = {r.id for r in await store.run_get_many([ended[3], queued.id, *other, *unthreaded])}
    assert kept == {ended[3], queued.id, *other, *unthreaded}, "open, newest, other threads, unthreaded"
    history = await store.thread_messages(ThreadMessagesParams("t"))
    assert [json.loads(m) for _, _, m in history] == [0, 1, 2, 3], "the history is the thread's"
    assert (await store.thread_run_reclaim(ThreadRunReclaimParams(keep=2))).run_ids == []
