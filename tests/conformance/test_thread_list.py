"""Listing threads: newest first, keyset pages, one tenant's or every tenant's, deleted
ones left out or marked, and what each thread's runs look like."""

from __future__ import annotations

from runwright.runs import RunState
from runwright.store._params import (
    RunCancelParams,
    RunFinishParams,
    RunInsertParams,
    RunReclaimParams,
    ThreadDeleteParams,
    ThreadInfo,
    ThreadListParams,
)

from .helpers import T0, claim, worker


def on_thread(thread: str, now: float, tenant: str | None = None, key: str | None = None,
              on_busy: str = "enqueue") -> RunInsertParams:
    return RunInsertParams(key=key or f"{tenant}:{thread}:{now}", task="t", args="{}", thread=thread,
                           on_busy=on_busy, tenant=tenant, now=now)


async def every_page(store, limit: int, **given) -> list[list[ThreadInfo]]:
    """Every page of the listing, each asked from the cursor of the one before."""
    pages, after = [], None
    while True:
        page = await store.thread_list(ThreadListParams(limit=limit, after=after, **given))
        pages.append(page)
        if len(page) < limit:
            return pages
        after = page[-1].cursor


def names(threads: list[ThreadInfo]) -> list[str]:
    return [t.thread for t in threads]


async def test_threads_are_listed_newest_first_in_keyset_pages(store):
    for i in range(5):
        await store.run_insert_threaded(on_thread(f"t{i}", T0 + i, tenant="alice"))
    pages = await every_page(store, 2, tenant="alice")
    assert [names(p) for p in pages] == [["t4", "t3"], ["t2", "t1"], ["t0"]]
    assert [t.created_at for p in pages for t in p] == [T0 + 4, T0 + 3, T0 + 2, T0 + 1, T0]
    # A thread created since the first page was read comes first, and moves no page after.
    first = pages[0]
    await store.run_insert_threaded(on_thread("t5", T0 + 5, tenant="alice"))
    after_first = await store.thread_list(ThreadListParams(tenant="alice", limit=2, after=first[-1].cursor))
    assert names(after_first) == ["t2", "t1"]
    assert names(await store.thread_list(ThreadListParams(tenant="alice", limit=1))) == ["t5"]


async def test_threads_created_at_one_instant_each_come_once(store):
    for thread in ("b", "a", "c", "d"):
        await store.run_insert_threaded(on_thread(thread, T0, tenant="alice"))
    await store.run_insert_threaded(on_thread("older", T0 - 1, tenant="alice"))
    pages = await every_page(store, 1, tenant="alice")
    listed = [t for p in pages for t in p]
    assert sorted(names(listed[:4])) == ["a", "b", "c", "d"] and names(listed[4:]) == ["older"]
    assert names(listed) == names(await store.thread_list(ThreadListParams(tenant="alice", limit=10)))


async def test_a_tenant_lists_its_own_threads_and_the_operator_every_tenants(store):
    await store.run_insert_threaded(on_thread("t", T0, tenant="alice"))
    await store.run_insert_threaded(on_thread("t", T0 + 1, tenant="bob"))
    await store.run_insert_threaded(on_thread("t", T0 + 2))  # the deployment's own: no tenant
    await store.run_insert_threaded(on_thread("alone", T0 + 3, tenant="bob"))
    alice = await store.thread_list(ThreadListParams(tenant="alice"))
    assert [(t.tenant, t.thread) for t in alice] == [("alice", "t")]
    bob = await store.thread_list(ThreadListParams(tenant="bob"))
    assert [(t.tenant, t.thread) for t in bob] == [("bob", "alone"), ("bob", "t")]
    every = await store.thread_list(ThreadListParams())
    assert [(t.tenant, t.thread) for t in every] == [("bob", "alone"), (None, "t"), ("bob", "t"),
                                                     ("alice", "t")]
    pages = await every_page(store, 1)  # the operator's pages cross tenants in the same order
    assert [(t.tenant, t.thread) for p in pages for t in p] == [(t.tenant, t.thread) for t in every]
    assert await store.thread_list(ThreadListParams(tenant="carol")) == []


async def test_each_thread_shows_its_runs_its_newest_and_whether_it_is_busy(store):
    wid = await store.worker_register(worker())
    first = await store.run_insert_threaded(on_thread("chat", T0, tenant="alice"))
    (running,) = await store.run_claim(claim(wid))
    assert running.id == first.id
    second = await store.run_insert_threaded(on_thread("chat", T0 + 1, tenant="alice"))
    other = await store.run_insert_threaded(on_thread("chat", T0 + 2, tenant="bob"))  # bob's "chat"
    (chat,) = await store.thread_list(ThreadListParams(tenant="alice"))
    assert (chat.runs, chat.open_runs, chat.busy) == (2, 2, True)
    assert (chat.last_run_id, chat.last_run_state) == (second.id, RunState.QUEUED)
    assert chat.created_at == T0 and not chat.deleted
    # The newest run cancelled while the first still runs: still busy.
    await store.run_cancel(RunCancelParams(second.id, now=T0 + 3))
    (chat,) = await store.thread_list(ThreadListParams(tenant="alice"))
    assert (chat.runs, chat.open_runs, chat.busy) == (2, 1, True)
    assert (chat.last_run_id, chat.last_run_state) == (second.id, RunState.CANCELLED)
    await store.run_finish_many([RunFinishParams(running.id, running.fence, RunState.SUCCEEDED,
                                                 result="1", now=T0 + 4)])
    (chat,) = await store.thread_list(ThreadListParams(tenant="alice"))
    assert (chat.runs, chat.open_runs, chat.busy) == (2, 0, False)
    (theirs,) = await store.thread_list(ThreadListParams(tenant="bob"))
    assert (theirs.runs, theirs.last_run_id, theirs.busy) == (1, other.id, True)


async def test_deleted_threads_are_left_out_unless_asked_for_and_then_marked(store):
    for i, thread in enumerate(("kept", "gone", "also-kept")):
        run = await store.run_insert_threaded(on_thread(thread, T0 + i, tenant="alice"))
        await store.run_cancel(RunCancelParams(run.id, now=T0 + i))
    assert await store.thread_delete(ThreadDeleteParams("gone", "alice", purge=True, now=T0 + 10))
    assert names(await store.thread_list(ThreadListParams(tenant="alice"))) == ["also-kept", "kept"]
    every = await store.thread_list(ThreadListParams(tenant="alice", include_deleted=True))
    assert [(t.thread, t.deleted) for t in every] == [("also-kept", False), ("gone", True), ("kept", False)]
    assert every[1].deleted_at == T0 + 10 and every[1].runs == 1
    # A page of live threads never ends early on deleted ones between them.
    pages = await every_page(store, 1, tenant="alice")
    assert [names(p) for p in pages] == [["also-kept"], ["kept"], []]


async def test_runs_retention_reclaimed_are_no_longer_counted(store):
    old = await store.run_insert_threaded(on_thread("chat", T0, tenant="alice"))
    await store.run_cancel(RunCancelParams(old.id, now=T0))
    new = await store.run_insert_threaded(on_thread("chat", T0 + 500, tenant="alice"))
    assert (await store.run_reclaim(RunReclaimParams(ended_before=T0 + 100))).run_ids == [old.id]
    (chat,) = await store.thread_list(ThreadListParams(tenant="alice"))
    assert (chat.runs, chat.last_run_id, chat.last_run_state) == (1, new.id, RunState.QUEUED)
    await store.run_cancel(RunCancelParams(new.id, now=T0 + 500))
    await store.run_reclaim(RunReclaimParams(ended_before=T0 + 1000))
    (chat,) = await store.thread_list(ThreadListParams(tenant="alice"))  # the thread stays, empty
    assert (chat.runs, chat.open_runs, chat.last_run_id, chat.last_run_state) == (0, 0, None, None)
