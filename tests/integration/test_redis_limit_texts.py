"""Redis's due sets of limits texts (layout 5, lib.lua's enqueue): every queued run that
carries limits is in its due set and in its text's, lheads orders each due set's texts by
their first run (in claim order: run_at, then id), lqueued counts them; whatever moves a
run in or out of a due set keeps the three agreeing, and a migration indexes what layout 4
wrote."""

from __future__ import annotations

import json

import pytest

from runwright.runs import RunState
from runwright.store._params import (
    RunCancelParams,
    RunClaimParams,
    RunExpireParams,
    RunFinishParams,
    RunInsertParams,
    RunPauseParams,
    RunRescueParams,
    RunResumeParams,
    RunRetryParams,
    SignalSendParams,
)

from ..conformance.helpers import T0, worker

pytestmark = pytest.mark.parametrize("backend", ["redis"])

_n = iter(range(1_000_000))


def limited(key: str, most: int = 1, **more) -> RunInsertParams:
    return RunInsertParams(key=f"lt{next(_n)}", task="lt", args="{}", now=T0,
                           limits=json.dumps([["tenant", key, most]]), **more)


def claim(worker_id: int, limit: int = 50, now: float = T0) -> RunClaimParams:
    return RunClaimParams(worker_id, ["default"], ["lt"], limit, 30.0, now=now, limited=("lt",))


async def books(store) -> dict[str, object]:
    """The limited claim's sets as the due sets say they must be, beside what they are."""
    r, p = store.redis, store.prefix
    due_sets = [key async for key in r.scan_iter(match=p + "due:*")]
    want_texts: dict[str, dict[str, float]] = {}
    want_counts: dict[str, int] = {}
    for due in due_sets:
        for member, score in await r.zrange(due, 0, -1, withscores=True):
            limits = await r.hget(p + f"run:{int(member)}", "limits")
            if limits:
                rest = due[len(p + "due:"):]
                want_texts.setdefault(f"{p}ldue:{len(limits.encode())}:{limits}:{rest}", {})[member] = score
                want_counts[due] = want_counts.get(due, 0) + 1
    have_texts = {key: dict(await r.zrange(key, 0, -1, withscores=True))
                  async for key in r.scan_iter(match=p + "ldue:*")}
    want_heads: dict[str, dict[str, float]] = {}
    for key, members in want_texts.items():
        length, rest = key[len(p + "ldue:"):].split(":", 1)
        text, due_rest = rest[:int(length)], rest[int(length) + 1:]
        head = min(members, key=lambda member: (members[member], member))
        want_heads.setdefault(f"{p}lheads:{due_rest}", {})[head + text] = members[head]
    have_heads = {key: dict(await r.zrange(key, 0, -1, withscores=True))
                  async for key in r.scan_iter(match=p + "lheads:*")}
    have_counts = {due: int(n) for due, n in (await r.hgetall(p + "lqueued")).items()}
    return {"texts": (want_texts, have_texts), "heads": (want_heads, have_heads),
            "counts": (want_counts, have_counts)}


async def assert_books_agree(store) -> None:
    for name, (want, have) in (await books(store)).items():
        assert have == want, name


def done(run, now: float = T0, state: RunState = RunState.SUCCEEDED, **more) -> RunFinishParams:
    return RunFinishParams(run.id, run.fence, state, result="null", now=now, limited=True, **more)


async def test_every_move_of_a_limited_run_keeps_its_texts_due_set_whole(store) -> None:
    wid = await store.worker_register(worker())
    a = await store.run_insert_many([limited("a", 2) for _ in range(6)] +
                                    [limited("a", 2, deadline_at=T0 + 5)])
    b = await store.run_insert_many([limited("b") for _ in range(3)] + [limited("b", priority=0)])
    await assert_books_agree(store)
    taken = await store.run_claim(claim(wid))
    assert sorted(r.id for r in taken) == sorted([b[3].id, a[0].id, a[1].id])
    await assert_books_agree(store)
    await store.run_cancel(RunCancelParams(a[2].id, now=T0))
    await store.run_pause(RunPauseParams(a[3].id, now=T0))
    await assert_books_agree(store)
    await store.run_resume(RunResumeParams(a[3].id, now=T0 + 1))
    by_id = {r.id: r for r in taken}
    # A requeue to later (a park), a give-back due now, a failure to retry.
    await store.run_finish_many([done(by_id[a[0].id], T0 + 1, RunState.QUEUED, run_at=T0 + 100),
                                 done(by_id[a[1].id], T0 + 1, RunState.QUEUED, release=True),
                                 done(by_id[b[3].id], T0 + 1, RunState.FAILED, error="x")])
    await assert_books_agree(store)
    await store.run_retry(RunRetryParams(b[3].id, now=T0 + 2))
    await store.run_expire_many(RunExpireParams(now=T0 + 10))
    assert (await store.run_get(a[6].id)).state is RunState.FAILED
    await assert_books_agree(store)
    again = await store.run_claim(claim(wid, now=T0 + 10))
    assert len([r for r in again if r.limits and "\"a\"" in r.limits]) == 2
    await assert_books_agree(store)
    # One parks on a signal (due in an hour), and the signal makes it due now.
    parked = again[0]
    await store.run_finish_many([done(parked, T0 + 10, RunState.QUEUED, run_at=T0 + 3600, waiting="signal")])
    await assert_books_agree(store)
    await store.signal_send(SignalSendParams(parked.id, "go", "null"))
    assert (await store.run_get(parked.id)).run_at < T0 + 3600
    await assert_books_agree(store)
    again = again[1:]
    # Its worker dies: the takeover puts its runs back in their due sets.
    await store.worker_deregister(wid)
    rescued = await store.run_rescue_many(RunRescueParams(now=T0 + 60, worker_stale_s=1e9))
    assert sorted(r.id for r in rescued) == sorted(r.id for r in again)
    await assert_books_agree(store)
    other = await store.worker_register(worker())
    while claimed := await store.run_claim(claim(other, now=T0 + 200)):
        await store.run_finish_many([done(r, T0 + 200) for r in claimed])
    await assert_books_agree(store)
    assert (await books(store))["texts"][1] == {}, "nothing left queued, nothing left indexed"


async def test_limited_runs_written_by_layout_4_are_indexed_after_migrating(store) -> None:
    wid = await store.worker_register(worker())
    big = await store.run_insert_many([limited("big") for _ in range(450)])
    (small,) = await store.run_insert_many([limited("small")])
    # What layout 4 wrote: the due sets alone.
    made = [key for match in ("ldue:*", "lheads:*", "lqueued")
            async for key in store.redis.scan_iter(match=store.key(match))]
    assert len(made) == 4  # a text each, the due set's heads, the counts
    await store.redis.delete(*made)
    await store.redis.set(store.key("schema_version"), 4)
    assert await store.migrate() == [5, 6]  # 6: rates' sets, made as runs spend (nothing to index)
    await assert_books_agree(store)
    assert sorted(r.id for r in await store.run_claim(claim(wid))) == [big[0].id, small.id]
    await assert_books_agree(store)
    assert await store.migrate() == []  # and the next process finds nothing to do


async def test_a_limited_run_queued_by_an_older_process_after_the_migration_is_claimed(store) -> None:
    """A process of layout 4 still running after the migration queues limited runs into
    their due sets alone: the limited claim, finding the due set holds more than its texts
    do, indexes them as it walks it, and they are claimed as any other (never stranded)."""
    wid = await store.worker_register(worker())
    runs = await store.run_insert_many([limited("a"), limited("b"), limited("b")])
    r, p = store.redis, store.prefix
    # Undo what layout 5 wrote of them, as layout 4 would never have written it.
    for key in [key for match in ("ldue:*", "lheads:*") async for key in r.scan_iter(match=p + match)]:
        await r.delete(key)
    await r.delete(p + "lqueued")
    taken: list[int] = []
    for _ in range(3):
        taken += [run.id for run in await store.run_claim(claim(wid))]
    assert sorted(taken) == [runs[0].id, runs[1].id], "a's, and one of b's (max 1)"
    await assert_books_agree(store)
