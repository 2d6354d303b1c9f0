"""Retention of threads, on every backend: the tombstones of deleted threads are reclaimed
after an age, judged by the store's clock; a name whose tombstone went may name a new
thread, and a reader that holds the old thread's identity (its incarnation) is told it
was deleted, never shown the new thread as its continuation; histories are trimmed to
their newest messages, sparing an open run's. Ages of runs are judged by the store's
clock too, whatever the sweeping worker's clock says."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import pytest
from prometheus_client import REGISTRY

from runwright.client._following import Follower
from runwright.core._clock import Clock
from runwright.engine._sweeper import Retention, Sweeper
from runwright.errors import ThreadDeleted, ThreadNotFound
from runwright.runs import RunState
from runwright.store._params import (
    EventAppendParams,
    RunFinishParams,
    RunInsertParams,
    RunListParams,
    RunReclaimParams,
    RunRetryParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadGetParams,
    ThreadMessagesParams,
    ThreadMessageTrimParams,
    ThreadTombstoneReclaimParams,
)

from .helpers import T0, claim, insert, worker

DEADLINE_S = 60
_keys = itertools.count()


def _threaded(thread: str, now: float = T0) -> RunInsertParams:
    return RunInsertParams(key=f"{thread}-{next(_keys)}", task="t", args="{}", thread=thread,
                           on_busy="enqueue", now=now)


async def _turn(store, wid: int, thread: str, messages: list[str], now: float = T0,
                end: bool = True) -> int:
    """One run of `thread` that adds `messages` to its history and a note to its log."""
    await store.run_insert_threaded(_threaded(thread, now))
    (run,) = await store.run_claim(claim(wid, now=now))
    for idx, text in enumerate(messages):
        assert await store.thread_append(ThreadAppendParams(run.id, run.fence, thread, idx,
                                                            json.dumps(text), now=now))
    assert await store.event_append(EventAppendParams(run.id, run.fence, [("note", json.dumps({}))], now=now))
    if end:
        assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED,
                                                            result="1", now=now)]) == []
    return run.id


async def _history(store, thread: str, incarnation: int | None = None) -> list[str]:
    rows = await store.thread_messages(ThreadMessagesParams(thread, incarnation=incarnation))
    return [json.loads(message) for _, _, message in rows]


async def _delete(store, thread: str, now: float) -> None:
    assert await store.thread_delete(ThreadDeleteParams(thread, purge=False, now=now))
    await store.thread_delete(ThreadDeleteParams(thread, purge=True, now=now))


async def test_a_tombstone_older_than_the_age_is_reclaimed_and_a_younger_one_kept(store):
    wid = await store.worker_register(worker())
    for name in ("old", "young", "unfinished", "live"):
        await _turn(store, wid, name, [name])
    await store.run_insert_threaded(_threaded("unfinished"))  # its delete never finished: still queued
    await _delete(store, "old", T0 + 10)
    await _delete(store, "young", T0 + 150)
    assert await store.thread_delete(ThreadDeleteParams("unfinished", now=T0 + 10))

    dry = await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(100, now=T0 + 200, dry_run=True))
    assert dry.threads == [(None, "old")]
    kept = await store.thread_get(ThreadGetParams("old"))
    assert kept.deleted_at is not None, "a dry run removes nothing"
    gone = await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(100, now=T0 + 200))
    assert gone.threads == [(None, "old")], "older than the age, and no run of it open"
    assert await store.thread_get(ThreadGetParams("old")) is None
    assert (await store.thread_get(ThreadGetParams("young"))).deleted_at == T0 + 150
    assert (await store.thread_get(ThreadGetParams("unfinished"))).deleted_at == T0 + 10
    assert (await store.thread_get(ThreadGetParams("live"))).deleted_at is None
    again = await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(100, now=T0 + 200))
    assert again.threads == []

    with pytest.raises(ThreadDeleted):  # a tombstone kept keeps its name taken, as before
        await store.run_insert_threaded(_threaded("young"))
    reborn = await store.run_insert_threaded(_threaded("old"))
    assert reborn.thread == "old" and reborn.state is RunState.QUEUED, "the name is free again"


async def test_a_tombstone_is_aged_by_the_stores_clock(store):
    wid = await store.worker_register(worker(now=time.time()))
    for name in ("long-ago", "just-now"):
        await _turn(store, wid, name, [name], now=time.time())
    await _delete(store, "long-ago", time.time() - 1000)
    await _delete(store, "just-now", time.time() - 10)
    gone = await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(500))  # no time injected
    assert gone.threads == [(None, "long-ago")]
    assert await store.thread_get(ThreadGetParams("just-now")) is not None


async def test_a_reader_of_the_old_incarnation_is_told_deleted_and_never_shown_the_new_thread(store):
    wid = await store.worker_register(worker())
    first = await _turn(store, wid, "t", ["old"])
    before = await store.thread_get(ThreadGetParams("t"))
    assert before.incarnation > 0 and before.deleted_at is None
    old_log = await store.thread_event_list(ThreadEventListParams("t", incarnation=before.incarnation))
    assert {e.run_id for e in old_log} == {first}
    assert await _history(store, "t", before.incarnation) == ["old"]

    await _delete(store, "t", T0 + 10)
    await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(5, now=T0 + 100))
    assert await store.run_get(first) is not None, "the old thread's run stays, as ended runs do"
    for read in (_history(store, "t", before.incarnation),
                 store.thread_event_list(ThreadEventListParams("t", incarnation=before.incarnation))):
        with pytest.raises(ThreadDeleted):
            await read  # reclaimed, not yet reused: still deleted to its reader
    with pytest.raises(ThreadNotFound):
        await store.thread_event_list(ThreadEventListParams("t"))  # by bare name: no thread now
    assert await _history(store, "t") == []

    second = await _turn(store, wid, "t", ["new"], now=T0 + 200)
    after = await store.thread_get(ThreadGetParams("t"))
    assert after.incarnation > before.incarnation and after.deleted_at is None
    for read in (_history(store, "t", before.incarnation),
                 store.thread_event_list(ThreadEventListParams("t", after=len(old_log),
                                                               incarnation=before.incarnation))):
        with pytest.raises(ThreadDeleted):
            await read
    new_log = await store.thread_event_list(ThreadEventListParams("t", incarnation=after.incarnation))
    assert {e.run_id for e in new_log} == {second}, "the old thread's runs are no part of the new one"
    assert [e.tseq for e in new_log] == list(range(1, len(new_log) + 1))
    assert await _history(store, "t") == ["new"] == await _history(store, "t", after.incarnation)


async def test_a_follower_of_a_thread_stops_with_thread_deleted_when_its_name_is_reused(store):
    wid = await store.worker_register(worker())
    await _turn(store, wid, "t", ["old"])
    count = len(await store.thread_event_list(ThreadEventListParams("t")))
    follow = Follower(store).thread_events("t", None)
    async with asyncio.timeout(DEADLINE_S):
        seen = [await anext(follow) for _ in range(count)]
        assert [e.tseq for e in seen] == list(range(1, count + 1))
        await _delete(store, "t", T0 + 10)
        await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(5, now=T0 + 100))
        await _turn(store, wid, "t", ["new"], now=T0 + 200)
        with pytest.raises(ThreadDeleted):
            shown = await anext(follow)
            pytest.fail(f"the old thread's follower was shown the new thread's {shown}")
    await follow.aclose()


async def test_a_history_keeps_its_newest_messages_and_an_open_runs_own(store):
    wid = await store.worker_register(worker())
    await _turn(store, wid, "t", ["a1", "a2", "a3"])
    await _turn(store, wid, "t", ["b1", "b2", "b3"])
    await _turn(store, wid, "t", ["c1", "c2", "c3"], end=False)  # still running
    await _turn(store, wid, "short", ["s1", "s2"])

    dry = await store.thread_message_trim(ThreadMessageTrimParams(keep=4, dry_run=True))
    assert (dry.threads, dry.messages) == ([(None, "t")], 5)
    assert len(await _history(store, "t")) == 9, "a dry run removes nothing"
    bounded = await store.thread_message_trim(ThreadMessageTrimParams(keep=4, limit=2))
    assert bounded.messages == 2, "a call removes at most its limit"
    rest = await store.thread_message_trim(ThreadMessageTrimParams(keep=4))
    assert rest.messages == 3
    assert await _history(store, "t") == ["b3", "c1", "c2", "c3"], "the newest 4"
    assert await _history(store, "short") == ["s1", "s2"]

    tight = await store.thread_message_trim(ThreadMessageTrimParams(keep=1))
    assert tight.messages == 2, "b3 and s1 go; the running run's messages all stay"
    assert await _history(store, "t") == ["c1", "c2", "c3"]
    assert await _history(store, "short") == ["s2"]
    assert (await store.thread_message_trim(ThreadMessageTrimParams(keep=1))).messages == 0


async def test_a_runs_age_is_judged_by_the_stores_clock_not_the_sweeping_workers(store):
    wid = await store.worker_register(worker(now=time.time()))
    (old, young) = [r.id for r in await store.run_insert_many([insert(now=time.time()) for _ in range(2)])]
    runs = {r.id: r for r in await store.run_claim(claim(wid, now=time.time()))}
    for run_id, ended_s_ago in ((old, 1200), (young, 60)):
        run = runs[run_id]
        assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1",
                                                            now=time.time() - ended_s_ago)]) == []
    assert (await store.run_reclaim(RunReclaimParams(max_age_s=600, dry_run=True))).run_ids == [old]

    behind = Sweeper(store, Clock(lambda: time.time() - 3600), Retention(max_age_s=600),
                     holder="behind", lease_s=60)
    ahead = Sweeper(store, Clock(lambda: time.time() + 3600), Retention(max_age_s=600),
                    holder="ahead", lease_s=60)
    assert (await ahead.sweep()).runs == [old], "an hour ahead, it still keeps the young run"
    assert await store.run_get(young) is not None
    assert (await behind.sweep()).runs == [], "nothing else is old"
    (late,) = await store.run_insert_many([insert(now=time.time())])
    (run,) = await store.run_claim(claim(wid, now=time.time()))
    await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result="1",
                                                 now=time.time() - 1200)])
    assert (await behind.sweep()).runs == [late.id], "an hour behind, it still reclaims the old run"


def _reclaimed(kind: str) -> float:
    return REGISTRY.get_sample_value("runwright_reclaimed_total", {"kind": kind}) or 0.0


async def test_a_sweep_reclaims_tombstones_and_messages_and_counts_them(store):
    wid = await store.worker_register(worker(now=time.time()))
    await _turn(store, wid, "gone", ["g"], now=time.time())
    await _turn(store, wid, "long", ["1", "2", "3"], now=time.time())
    await _delete(store, "gone", time.time() - 100)
    tombstones, messages = _reclaimed("tombstones"), _reclaimed("messages")
    sweeper = Sweeper(store, Clock(), Retention(tombstone_age_s=50, thread_max_messages=1),
                      holder="sweeper", lease_s=60)
    report = await sweeper.sweep()
    assert (report.tombstones, report.messages, report.message_threads) == ([(None, "gone")], 2, 1)
    assert report.as_dict()["tombstones"] == 1 and report.removed_anything
    assert (_reclaimed("tombstones") - tombstones, _reclaimed("messages") - messages) == (1, 2)
    assert await _history(store, "long") == ["3"]


async def test_a_thread_comes_to_exist_with_its_first_run_and_keeps_its_incarnation(store):
    first = await store.run_insert_threaded(_threaded("t"))
    incarnation = (await store.thread_get(ThreadGetParams("t"))).incarnation
    assert incarnation > 0
    await store.run_insert_threaded(_threaded("t"))
    again = await store.thread_get(ThreadGetParams("t"))
    assert again.incarnation == incarnation, "a later run changes nothing"
    taken = RunInsertParams(key=first.key, task="t", args="{}", thread="fresh", on_busy="enqueue", now=T0)
    existing = await store.run_insert_threaded(taken)
    assert existing.existed and existing.id == first.id
    found = await store.thread_get(ThreadGetParams("fresh"))
    assert found is None or found.incarnation > 0, "no thread stands without an incarnation"


async def _dead_turn(store, wid: int, thread: str, now: float = T0) -> int:
    """One run of `thread` that ran out of attempts (dead: a run a retry re-queues)."""
    await store.run_insert_threaded(_threaded(thread, now))
    (run,) = await store.run_claim(claim(wid, now=now))
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.DEAD,
                                                        error='{"type": "X"}', now=now)]) == []
    return run.id


async def _listed(store, thread: str, incarnation: int | None = None, **filters) -> list[int]:
    return [run.id for run in await store.run_list(RunListParams(thread=thread, incarnation=incarnation,
                                                                 **filters))]


async def test_a_reused_names_runs_are_the_new_threads_only(store):
    wid = await store.worker_register(worker())
    first = await _turn(store, wid, "t", ["old"])
    old = (await store.thread_get(ThreadGetParams("t"))).incarnation
    assert await _listed(store, "t") == [first] == await _listed(store, "t", old)
    await _delete(store, "t", T0 + 10)
    assert await _listed(store, "t") == [first], "a deleted thread's runs are listed by its name"
    with pytest.raises(ThreadDeleted):
        await _listed(store, "t", old)  # to the reader of the thread, it is deleted
    await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(5, now=T0 + 100))
    assert await _listed(store, "t") == [first], "no thread bears the name: its runs by name"

    second = await _turn(store, wid, "t", ["new"], now=T0 + 200)
    third = (await store.run_insert_threaded(_threaded("t", T0 + 300))).id
    new = (await store.thread_get(ThreadGetParams("t"))).incarnation
    assert await _listed(store, "t") == [third, second], "the earlier thread's run is not this one's"
    assert await _listed(store, "t", new) == [third, second]
    assert await _listed(store, "t", new, before_id=third) == [second]
    assert await _listed(store, "t", states=[RunState.SUCCEEDED]) == [second]
    for held in (old, new + 1000):
        with pytest.raises(ThreadDeleted):
            await _listed(store, "t", held)
    assert first in await _listed(store, None), "listed by no thread, every run is"


async def test_a_retry_of_a_run_of_a_deleted_thread_is_refused(store):
    wid = await store.worker_register(worker())
    live = await _dead_turn(store, wid, "kept")
    doomed = await _dead_turn(store, wid, "gone")
    assert (await store.run_retry(RunRetryParams(live, now=T0 + 1))).state is RunState.QUEUED
    await _delete(store, "gone", T0 + 10)
    with pytest.raises(ThreadDeleted):
        await store.run_retry(RunRetryParams(doomed, now=T0 + 20))
    assert (await store.run_get(doomed)).state is RunState.DEAD, "refused, the run is as it was"
    assert await _listed(store, "gone", states=[RunState.QUEUED, RunState.RUNNING]) == []
    await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(5, now=T0 + 100))
    with pytest.raises(ThreadDeleted):
        await store.run_retry(RunRetryParams(doomed, now=T0 + 120))  # reclaimed: no thread to rejoin
    assert (await store.run_get(doomed)).state is RunState.DEAD


async def test_a_retry_of_an_earlier_threads_run_never_joins_the_thread_that_took_its_name(store):
    wid = await store.worker_register(worker())
    old_run = await _dead_turn(store, wid, "t")
    await _delete(store, "t", T0 + 10)
    await store.thread_tombstone_reclaim(ThreadTombstoneReclaimParams(5, now=T0 + 100))
    second = await _turn(store, wid, "t", ["new"], now=T0 + 200)
    thread = await store.thread_get(ThreadGetParams("t"))
    log = await store.thread_event_list(ThreadEventListParams("t"))

    with pytest.raises(ThreadDeleted):
        await store.run_retry(RunRetryParams(old_run, now=T0 + 300))
    assert (await store.run_get(old_run)).state is RunState.DEAD
    assert await store.thread_get(ThreadGetParams("t")) == thread
    assert await _history(store, "t") == ["new"]
    assert await store.thread_event_list(ThreadEventListParams("t")) == log
    assert {e.run_id for e in log} == {second}
    assert await _listed(store, "t") == [second]
    # Not held busy by the earlier thread's run: a submission that refuses a busy thread goes in.
    taken = RunInsertParams(key="after-reuse", task="t", args="{}", thread="t", on_busy="reject",
                            now=T0 + 400)
    assert (await store.run_insert_threaded(taken)).state is RunState.QUEUED
    (run,) = await store.run_claim(claim(wid, now=T0 + 400))
    assert run.id != old_run, "no worker is given the earlier thread's run"
    assert await store.run_finish_many([RunFinishParams(run.id, run.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0 + 400)]) == []

    own = await _dead_turn(store, wid, "t", now=T0 + 500)  # the new thread's own dead run
    assert (await store.run_retry(RunRetryParams(own, now=T0 + 600))).state is RunState.QUEUED
