"""Tenants in the store: a tenant's keys and thread names are its own, by column."""

from __future__ import annotations

import json

import pytest

from runwright.errors import ThreadBusy, ThreadDeleted
from runwright.store._params import (
    RunInsertParams,
    RunListParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadMessagesParams,
)

from .helpers import T0, claim, worker


def submitted(key: str, tenant: str | None, thread: str | None = None,
              on_busy: str = "reject") -> RunInsertParams:
    return RunInsertParams(key=key, task="t", args="{}", thread=thread, on_busy=on_busy,
                           tenant=tenant, now=T0)


async def test_one_key_names_one_run_per_tenant(store):
    a, b, none = [(await store.run_insert_many([submitted("shared", tenant)]))[0]
                  for tenant in ("a", "b", None)]
    assert len({a.id, b.id, none.id}) == 3 and not (a.existed or b.existed or none.existed)
    assert (a.tenant, b.tenant, none.tenant) == ("a", "b", None)
    (again,) = await store.run_insert_many([submitted("shared", "b")])
    assert again.existed and again.id == b.id
    # Tenants whose names would collide if joined with the key as strings stay apart.
    (slash,) = await store.run_insert_many([submitted("x/shared", "a")])
    (other,) = await store.run_insert_many([submitted("shared", "a/x")])
    assert slash.id != other.id and not other.existed
    listed = await store.run_list(RunListParams(tenant="b"))
    assert [run.id for run in listed] == [b.id]


async def test_a_key_is_searched_among_one_tenants_keys_or_every_tenants(store):
    a, b = [(await store.run_insert_many([submitted("order-7", tenant)]))[0] for tenant in ("a", "b")]
    await store.run_insert_many([submitted("order-70", "a"), submitted("ORDER-7", "a")])
    assert [r.id for r in await store.run_list(RunListParams(key="order-7", tenant="a"))] == [a.id]
    assert [r.id for r in await store.run_list(RunListParams(key="order-7"))] == [b.id, a.id]
    assert await store.run_list(RunListParams(key="order-7", tenant="c")) == []


async def test_threads_of_the_same_name_are_apart_per_tenant(store):
    wid = await store.worker_register(worker())
    first = await store.run_insert_threaded(submitted("1", "a", thread="t"))
    # Tenant b's thread "t" is idle although tenant a's is busy.
    other = await store.run_insert_threaded(submitted("1", "b", thread="t"))
    assert other.id != first.id and not other.existed
    with pytest.raises(ThreadBusy):
        await store.run_insert_threaded(submitted("2", "a", thread="t"))
    claimed = {run.id: run for run in await store.run_claim(claim(wid, limit=10))}
    assert set(claimed) == {first.id, other.id}  # neither waits for the other tenant's run
    for run, text in ((claimed[first.id], "from a"), (claimed[other.id], "from b")):
        assert await store.thread_append(ThreadAppendParams(run.id, run.fence, "t", 0,
                                                            json.dumps(text), now=T0))
    history_a = await store.thread_messages(ThreadMessagesParams("t", "a"))
    history_b = await store.thread_messages(ThreadMessagesParams("t", "b"))
    assert [json.loads(m) for _, _, m in history_a] == ["from a"]
    assert [json.loads(m) for _, _, m in history_b] == ["from b"]
    assert await store.thread_delete(ThreadDeleteParams("t", "a", purge=True, now=T0))
    with pytest.raises(ThreadDeleted):
        await store.thread_messages(ThreadMessagesParams("t", "a"))
    assert len(await store.thread_messages(ThreadMessagesParams("t", "b"))) == 1
    assert not await store.thread_delete(ThreadDeleteParams("t", "c", now=T0))  # c has none


async def test_a_thread_listing_is_one_tenants_thread(store):
    ours = await store.run_insert_threaded(submitted("1", None, thread="t", on_busy="enqueue"))
    theirs = await store.run_insert_threaded(submitted("1", "a", thread="t", on_busy="enqueue"))
    assert [r.id for r in await store.run_list(RunListParams(thread="t"))] == [ours.id]
    assert [r.id for r in await store.run_list(RunListParams(thread="t", tenant="a"))] == [theirs.id]
    assert {r.id for r in await store.run_list(RunListParams())} == {ours.id, theirs.id}


async def test_tenant_and_name_never_join_into_one_string(store):
    # "team-a" + "x/k1" and "team-a/x" + "k1" read alike when joined with "/" (or ":" for
    # the other pair): each pair must stay two runs, and two threads.
    pairs = [(("team-a", "x/k1"), ("team-a/x", "k1")), (("team-a", "x:k1"), ("team-a:x", "k1")),
             (("a", '","b'), ('a","', "b"))]  # and a quote cannot break out of an encoding
    threaded = []
    for (tenant_1, name_1), (tenant_2, name_2) in pairs:
        (first,) = await store.run_insert_many([submitted(name_1, tenant_1)])
        (second,) = await store.run_insert_many([submitted(name_2, tenant_2)])
        assert second.id != first.id and not second.existed, (tenant_2, name_2)
        threaded_1 = await store.run_insert_threaded(submitted(f"t-{name_1}", tenant_1, thread=name_1))
        # The other tenant's thread is idle: not ThreadBusy, not the first thread's run.
        threaded_2 = await store.run_insert_threaded(submitted(f"t-{name_2}", tenant_2, thread=name_2))
        assert threaded_2.id != threaded_1.id and not threaded_2.existed
        threaded += [threaded_1.id, threaded_2.id]
        listed = await store.run_list(RunListParams(thread=name_2, tenant=tenant_2))
        assert [run.id for run in listed] == [threaded_2.id]
        assert await store.thread_delete(ThreadDeleteParams(name_1, tenant_1, purge=True, now=T0))
        assert await store.thread_messages(ThreadMessagesParams(name_2, tenant_2)) == []
    # Neither thread's run waits for the other's: a claim takes them all at once.
    wid = await store.worker_register(worker())
    claimed = {run.id for run in await store.run_claim(claim(wid, limit=20))}
    assert set(threaded) <= claimed
