"""Store scenarios for submission, reading and claiming; each runs on every backend."""

from __future__ import annotations

import asyncio
import json

import pytest

from runwright.runs import Run, RunState
from runwright.store import store_from_url
from runwright.store._params import (
    RunCancelParams,
    RunCountDueParams,
    RunCountParams,
    RunEndedParams,
    RunFinishParams,
    RunInsertParams,
    RunListParams,
    RunNextDueParams,
)

from .helpers import T0, claim, insert, worker


async def test_insert_returns_queued_runs_in_submission_order(store):
    runs = await store.run_insert_many([insert("a"), insert("b"), insert("c")])
    assert [r.key for r in runs] == ["a", "b", "c"]
    assert all(r.state is RunState.QUEUED and r.fence == 0 and r.attempt == 0 for r in runs)
    assert runs[0].id < runs[1].id < runs[2].id
    assert not any(r.existed for r in runs)
    assert runs[0].run_at == T0 and runs[0].created_at == T0


async def every_option(store, run_at: float | None = None) -> tuple[RunInsertParams, RunInsertParams, Run]:
    """To insert: a run with every option set, and a child of `parent` (inserted here)."""
    full = insert(priority=0, run_at=run_at, max_attempts=7)
    full.timeout_s, full.budget, full.deadline_at = 12.5, '{"max_cost_usd": 0.5}', T0 + 300.25
    full.tenant, full.version = "acme", "2.1.0"
    full.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    (parent,) = await store.run_insert_many([insert()])
    child = insert()
    child.parent_id = parent.id
    return full, child, parent


async def test_the_run_an_insert_returns_is_the_run_a_read_returns(store):
    """A store may build the new runs it returns from what was inserted instead of reading
    them back: every field must be what a read of the run gives, whatever options it had."""
    bare = insert()
    full, child, parent = await every_option(store, run_at=T0 + 10.123456789)
    many = [insert() for _ in range(450)]  # PostgreSQL writes this in chunks
    returned = await store.run_insert_many([bare, full, child, *many])
    read = await store.run_get_many([run.id for run in returned])
    assert returned == sorted(read, key=lambda run: run.id)
    assert returned[1].version == "2.1.0" and returned[2].parent_id == parent.id


async def test_a_batch_of_fresh_keys_makes_the_runs_it_was_given(store):
    """Fresh keys (inserted unchecked): a batch whose runs differ only in key and
    arguments (PostgreSQL: INSERT_UNIFORM, one chunk and several), and batches whose runs
    differ in any other field (INSERT_FRESH). Each run returned is what a read gives, in
    the caller's order, ids rising in it."""
    full, child, _ = await every_option(store, run_at=T0 + 7.5)
    alike = [insert() for _ in range(453)]
    for n, p in enumerate(alike):
        p.args = f'{{"n":{n}}}'
    mixed = [insert(), full, child, insert(queue="other", priority=5)]
    one_off = [insert() for _ in range(3)]
    one_off[2].max_attempts = 9  # the last run alone differs
    for batch in (alike[:3], alike[3:], mixed, one_off):
        for p in batch:
            p.key_is_fresh = True
        made = await store.run_insert_many(batch)
        given = [(p.key, p.args, p.max_attempts) for p in batch]
        assert [(r.key, r.args, r.max_attempts) for r in made] == given
        assert made == sorted(await store.run_get_many([r.id for r in made]), key=lambda run: run.id)
        assert not any(r.existed for r in made)


async def test_the_run_a_claim_returns_is_the_run_a_read_returns(store):
    """A store may answer a claim with what it wrote alike on every run it took (owner,
    lease, start) instead of reading it back: each claimed run must be what a read gives,
    a fresh one, one with every option set, and one claimed again after a failed attempt
    (its error kept, its attempt and fence counted on)."""
    wid = await store.worker_register(worker())
    full, child, _ = await every_option(store)
    fresh, full_run, child_run = await store.run_insert_many([insert(), full, child])
    ids = {fresh.id, full_run.id, child_run.id}
    claimed = sorted((r for r in await store.run_claim(claim(wid, limit=10, now=T0 + 1)) if r.id in ids),
                     key=lambda r: r.id)
    read = sorted(await store.run_get_many(sorted(ids)), key=lambda r: r.id)
    assert claimed == read and len(claimed) == 3

    again = next(r for r in claimed if r.id == fresh.id)
    assert await store.run_finish_many([RunFinishParams(
        again.id, again.fence, RunState.QUEUED, error='{"type": "E"}', run_at=T0 + 2,
        now=T0 + 1.5)]) == []
    (retried,) = await store.run_claim(claim(wid, limit=1, now=T0 + 3))
    assert retried == await store.run_get(retried.id)
    assert (retried.id, retried.attempt, retried.fence, retried.error) == (fresh.id, 2, 2, '{"type": "E"}')


async def test_insert_of_an_existing_key_returns_the_existing_run(store):
    (first,) = await store.run_insert_many([insert("same")])
    again, other = await store.run_insert_many([insert("same", task="other"), insert("new")])
    assert again.id == first.id and again.existed and again.task == "t"
    assert not other.existed
    counts = await store.run_count_by_state(RunCountParams())
    assert counts == {"queued": 2}


async def test_a_key_repeated_within_one_batch_makes_one_run(store):
    runs = await store.run_insert_many([insert("dup"), insert("dup")])
    assert runs[0].id == runs[1].id
    assert [r.existed for r in runs] == [False, True]
    assert (await store.run_count_by_state(RunCountParams())) == {"queued": 1}


async def test_a_retried_insert_of_fresh_keys_returns_the_runs_it_made(store):
    """Keys made for the submission (key_is_fresh) may be inserted unchecked; a retry of
    that insert after it committed (its reply lost) must still meet its own runs, and
    fresh keys beside a taken one in the same batch are still inserted."""
    made = [insert(f"fresh-{n}") for n in range(450)]  # PostgreSQL sends this in chunks
    for p in made:
        p.key_is_fresh = True
    first = await store.run_insert_many(made)
    again = await store.run_insert_many(made)
    assert [r.id for r in again] == [r.id for r in first]
    assert all(r.existed for r in again) and not any(r.existed for r in first)
    newer = insert("fresh-450")
    newer.key_is_fresh = True
    mixed = await store.run_insert_many([made[0], newer])
    assert mixed[0].existed and mixed[0].id == first[0].id
    assert not mixed[1].existed and mixed[1].id > first[-1].id
    assert (await store.run_count_by_state(RunCountParams())) == {"queued": 451}


async def test_one_run_inserted_alone_is_the_run_a_read_returns(store):
    """A submit of one run (PostgreSQL: a statement of its own, INSERT_ONE), with every
    option or as a child, returns what a read gives; retried after it committed (a fresh
    key, inserted unchecked), it meets its run."""
    full, child, _parent = await every_option(store, run_at=T0 + 5.25)
    for alone in (full, child, insert()):
        alone.key_is_fresh = True
        (first,) = await store.run_insert_many([alone])
        assert [first] == await store.run_get_many([first.id]) and not first.existed
        (again,) = await store.run_insert_many([alone])
        assert again.existed and again.id == first.id


async def test_existing_key_is_returned_whatever_its_state(store):
    wid = await store.worker_register(worker())
    (run,) = await store.run_insert_many([insert("k-done")])
    (claimed,) = await store.run_claim(claim(wid))
    assert await store.run_finish_many([RunFinishParams(run.id, claimed.fence, RunState.SUCCEEDED,
                                                        result="1", now=T0)]) == []
    (again,) = await store.run_insert_many([insert("k-done")])
    assert again.existed and again.state is RunState.SUCCEEDED and again.id == run.id


async def test_get_and_get_many(store):
    runs = await store.run_insert_many([insert() for _ in range(3)])
    assert (await store.run_get(runs[1].id)).key == runs[1].key
    assert await store.run_get(987654) is None
    assert [r.id for r in await store.run_get_many([runs[2].id, runs[0].id, 424242])] == \
        [runs[0].id, runs[2].id]


async def test_list_filters_and_pages_newest_first(store):
    await store.run_insert_many([insert(task="a"), insert(task="b", queue="q2"), insert(task="a")])
    everything = await store.run_list(RunListParams())
    assert [r.id for r in everything] == sorted((r.id for r in everything), reverse=True)
    assert {r.task for r in await store.run_list(RunListParams(task="a"))} == {"a"}
    assert [r.queue for r in await store.run_list(RunListParams(queue="q2"))] == ["q2"]
    page = await store.run_list(RunListParams(limit=1, before_id=everything[0].id))
    assert [r.id for r in page] == [everything[1].id]
    assert await store.run_list(RunListParams(states=[RunState.DEAD])) == []


async def test_claim_orders_by_priority_then_run_at_then_submission(store):
    wid = await store.worker_register(worker())
    low = await store.run_insert_many([insert(priority=3)])
    late = await store.run_insert_many([insert(priority=1, run_at=T0 - 1)])
    early = await store.run_insert_many([insert(priority=1, run_at=T0 - 5)])
    first_of_two, second_of_two = await store.run_insert_many([insert(priority=0), insert(priority=0)])
    claimed = await store.run_claim(claim(wid, limit=10))
    assert [r.id for r in claimed] == [first_of_two.id, second_of_two.id, early[0].id,
                                       late[0].id, low[0].id]


async def test_claim_takes_at_most_limit_and_bumps_fence_attempt_and_lease(store):
    wid = await store.worker_register(worker())
    await store.run_insert_many([insert() for _ in range(5)])
    claimed = await store.run_claim(claim(wid, limit=3, lease_s=12))
    assert len(claimed) == 3
    for run in claimed:
        assert run.state is RunState.RUNNING and run.owner == wid
        assert run.fence == 1 and run.attempt == 1
        assert run.lease_expires_at == T0 + 12 and run.started_at == T0
    assert len(await store.run_claim(claim(wid, limit=10))) == 2
    assert await store.run_claim(claim(wid, limit=10)) == []


async def test_claim_skips_runs_not_due_other_queues_and_unregistered_tasks(store):
    wid = await store.worker_register(worker())
    later, other_queue, other_task = await store.run_insert_many([
        insert(run_at=T0 + 60), insert(queue="gpu"), insert(task="not-mine")])
    assert await store.run_claim(claim(wid)) == []
    assert await store.run_next_due_at(RunNextDueParams(["default"], ["t"])) == T0 + 60
    assert [r.id for r in await store.run_claim(claim(wid, now=T0 + 61))] == [later.id]
    got = await store.run_claim(claim(wid, queues=("gpu",), tasks=("t", "not-mine")))
    assert [r.id for r in got] == [other_queue.id]
    assert await store.run_next_due_at(RunNextDueParams(["default"], ["t"])) is None


async def test_concurrent_claims_from_separate_connections_never_share_a_run(store, store_url):
    others = [store_from_url(store_url) for _ in range(3)]
    for other in others:
        await other.open()
    try:
        wid = await store.worker_register(worker())
        total = 300
        await store.run_insert_many([insert() for _ in range(total)])

        async def drain(s) -> list[int]:
            got: list[int] = []
            while batch := await s.run_claim(claim(wid, limit=7)):
                got += [r.id for r in batch]
            return got

        results = await asyncio.gather(*(drain(s) for s in [store, *others]))
        claimed = [run_id for got in results for run_id in got]
        assert len(claimed) == total
        assert len(set(claimed)) == total
    finally:
        for other in others:
            await other.close()


@pytest.mark.parametrize("count", [0, 1])
async def test_empty_and_single_batches(store, count):
    runs = await store.run_insert_many([insert() for _ in range(count)])
    assert len(runs) == count


async def test_count_due_by_task_sees_only_due_runs_of_the_queues(store):
    await store.run_insert_many([insert(task="a"), insert(task="a"), insert(task="b"),
                                 insert(task="a", run_at=T0 + 100), insert(task="c", queue="other")])
    due = await store.run_count_due_by_task(RunCountDueParams(["default"], due_before=T0 + 1))
    assert due == {"a": 2, "b": 1}
    assert await store.run_count_due_by_task(RunCountDueParams(["default"], due_before=T0 - 1)) == {}


async def test_claim_over_several_queues_merges_them_in_claim_order(store):
    wid = await store.worker_register(worker())
    a_low, a_high = await store.run_insert_many([insert(queue="a", priority=3),
                                                 insert(queue="a", priority=1)])
    b_mid, b_high = await store.run_insert_many([insert(queue="b", priority=2),
                                                 insert(queue="b", priority=0)])
    first = await store.run_claim(claim(wid, limit=2, queues=("a", "b")))
    assert [r.id for r in first] == [b_high.id, a_high.id]
    rest = await store.run_claim(claim(wid, limit=5, queues=("a", "b")))
    assert [r.id for r in rest] == [b_mid.id, a_low.id]


async def test_runs_of_tasks_a_worker_lacks_ahead_in_its_queue_do_not_hide_its_own(store):
    # Workers that serve different tasks of one queue: thousands of due runs of a task this
    # worker lacks, submitted first, must not keep it from the runs it can do.
    wid = await store.worker_register(worker())
    for _ in range(3):
        await store.run_insert_many([insert(task="theirs") for _ in range(1000)])
    mine = await store.run_insert_many([insert(task="t")])  # due as long, submitted last
    assert await store.run_next_due_at(RunNextDueParams(["default"], ["t"])) == T0
    assert [r.id for r in await store.run_claim(claim(wid))] == [mine[0].id]


async def test_claim_merges_the_tasks_of_one_queue_in_claim_order(store):
    wid = await store.worker_register(worker())
    a_late, b_early, a_early, b_high = await store.run_insert_many([
        insert(task="a", run_at=T0 - 1), insert(task="b", run_at=T0 - 3),
        insert(task="a", run_at=T0 - 3), insert(task="b", priority=0, run_at=T0)])
    claimed = await store.run_claim(claim(wid, tasks=("a", "b")))
    assert [r.id for r in claimed] == [b_high.id, b_early.id, a_early.id, a_late.id]


async def test_one_key_submitted_at_once_from_many_connections_makes_one_run(store, store_url):
    # Idempotent submission under a race: every caller gets the same run, exactly one of
    # them the one that made it.
    others = [store_from_url(store_url) for _ in range(4)]
    for other in others:
        await other.open()
    try:
        keys = [f"race-{n}" for n in range(20)]
        batches = await asyncio.gather(*(
            s.run_insert_many([insert(key=k) for k in keys]) for s in [store, *others]))
    finally:
        for other in others:
            await other.close()
    for position, key in enumerate(keys):
        runs = [batch[position] for batch in batches]
        assert {r.key for r in runs} == {key} and len({r.id for r in runs}) == 1
        assert sum(not r.existed for r in runs) == 1


async def test_a_runs_traceparent_is_kept_through_every_read_and_claim(store):
    """The traceparent given at submission is stored with the run and read back wherever
    the run is read (the attempt that claims it continues that trace); none means none."""
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = insert("traced")
    traced.traceparent = traceparent
    threaded = insert("threaded")
    threaded.traceparent, threaded.thread = traceparent, "th"
    (run, plain) = await store.run_insert_many([traced, insert("plain")])
    assert (run.traceparent, plain.traceparent) == (traceparent, None)
    assert (await store.run_insert_threaded(threaded)).traceparent == traceparent
    (again,) = await store.run_insert_many([insert("traced")])
    assert again.existed and again.traceparent == traceparent, "the first submission's, kept"
    assert (await store.run_get(run.id)).traceparent == traceparent
    assert {r.key: r.traceparent for r in await store.run_list(RunListParams())} == {
        "traced": traceparent, "plain": None, "threaded": traceparent}
    wid = await store.worker_register(worker())
    claimed = {r.key: r.traceparent for r in await store.run_claim(claim(wid))}
    assert claimed == {"traced": traceparent, "plain": None, "threaded": traceparent}


async def test_ended_times_are_the_latest_ended_runs_of_the_window(store):
    """The summary's sample: (run_at, started_at, finished_at) of runs ended since `since`,
    latest ended first, at most `limit`, of one tenant's runs when asked; open runs and
    runs ended before the window are not in it; a queued run cancelled has no start."""
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([insert(run_at=T0 - 5) for _ in range(4)])
    mine = insert(run_at=T0 - 5)
    mine.tenant = "acme"
    (theirs,) = await store.run_insert_many([mine])
    claimed = {r.id: r for r in await store.run_claim(claim(wid, limit=4, now=T0))}
    ends = {runs[0].id: T0 - 100, runs[1].id: T0 + 1, runs[2].id: T0 + 3}  # runs[3] stays running
    for run_id, at in ends.items():
        assert await store.run_finish_many([RunFinishParams(
            run_id, claimed[run_id].fence, RunState.SUCCEEDED, result="1", now=at)]) == []
    await store.run_cancel(RunCancelParams(theirs.id, now=T0 + 2))

    sample = await store.run_ended_times(RunEndedParams(since=T0 - 10))
    assert sample == [(T0 - 5, T0, T0 + 3), (T0 - 5, None, T0 + 2), (T0 - 5, T0, T0 + 1)]
    assert await store.run_ended_times(RunEndedParams(since=T0 - 10, limit=1)) == [(T0 - 5, T0, T0 + 3)]
    assert await store.run_ended_times(RunEndedParams(since=T0 - 10, tenant="acme")) == [
        (T0 - 5, None, T0 + 2)]
    assert await store.run_ended_times(RunEndedParams(since=T0 + 4)) == []


async def test_list_finds_runs_by_the_text_of_their_error(store):
    """`error` finds the runs whose error contains a text: its type, message or
    traceback, ASCII letters in any case; `%`, `_` and `\\` in the text are themselves,
    not wildcards; a quote or a newline is found as written (the column holds JSON, which
    escapes them); a run without an error is never found; the other filters and the page
    still apply."""
    wid = await store.worker_register(worker())
    errors = {"timeout": {"type": "TimeoutError", "message": "upstream took 30 s"},
              "percent": {"type": "ValueError", "message": "100% of quota_used"},
              "quoted": {"type": "KeyError", "message": 'no "order" in C:\\tmp\nsecond line'},
              "other": {"type": "RuntimeError", "message": "disk full",
                        "traceback": "Traceback ...\n  in fetch_upstream\nRuntimeError: disk full"}}
    made = {}
    for key, error in errors.items():
        (run,) = await store.run_insert_many([insert(key=f"err-{key}", task="e")])
        (claimed,) = await store.run_claim(claim(wid, limit=1, tasks=("e",)))
        assert claimed.id == run.id
        assert await store.run_finish_many([RunFinishParams(run.id, claimed.fence, RunState.DEAD,
                                                            error=json.dumps(error), now=T0)]) == []
        made[key] = run.id
    (fine,) = await store.run_insert_many([insert(key="err-none", task="e")])

    async def found(text: str, **filters) -> list[int]:
        return [r.id for r in await store.run_list(RunListParams(error=text, **filters))]

    assert await found("upstream") == [made["other"], made["timeout"]]  # message, or traceback
    assert await found("TIMEOUTERROR") == [made["timeout"]]  # any case
    assert await found("timeouterror") == [made["timeout"]]
    assert await found("100%") == [made["percent"]]
    assert await found("0%") == [made["percent"]]
    assert await found("%") == [made["percent"]]  # a literal percent, not "anything"
    assert await found("o_a") == []  # `_` is an underscore, not any one character ("quota") ...
    assert await found("a_used") == [made["percent"]]  # ... ("quota_used")
    assert await found('"order"') == [made["quoted"]]
    assert await found("C:\\tmp") == [made["quoted"]]
    assert await found("tmp\nsecond") == [made["quoted"]]
    assert await found("\\") == [made["quoted"]]
    assert await found("nowhere to be found") == []
    assert fine.id not in await found("e")
    assert await found("error", limit=2) == [made["other"], made["quoted"]]
    assert await found("error", before_id=made["quoted"]) == [made["percent"], made["timeout"]]
    assert await found("upstream", states=[RunState.QUEUED]) == []
    assert await found("upstream", task="nope") == []
