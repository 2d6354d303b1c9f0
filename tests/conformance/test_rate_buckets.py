"""Token buckets shared through the store: atomic takes, refill, debt, on every backend."""

from __future__ import annotations

import asyncio

import pytest

from runwright.store._params import BucketTakeParams

from .helpers import T0


def take(amount: float = 1.0, now: float = T0, name: str = "model:x:requests", force: bool = False,
         capacity: float = 3.0, refill_per_s: float = 1.0) -> BucketTakeParams:
    return BucketTakeParams(name, capacity, refill_per_s, amount, force, now)


async def test_a_bucket_starts_full_refills_with_time_and_says_how_long_to_wait(store):
    assert [await store.bucket_take(take()) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert await store.bucket_take(take()) == pytest.approx(1.0)  # empty: one token a second
    assert await store.bucket_take(take(now=T0 + 0.25)) == pytest.approx(0.75)
    assert await store.bucket_take(take(now=T0 + 1.0)) == 0.0
    assert await store.bucket_take(take(amount=2, now=T0 + 2.0)) == pytest.approx(1.0)  # refused: 1 held
    assert await store.bucket_take(take(now=T0 + 2.0)) == 0.0  # a refusal took nothing
    assert await store.bucket_take(take(now=T0 + 100)) == 0.0  # refill stops at the capacity
    assert await store.bucket_take(take(amount=3, now=T0 + 100)) == pytest.approx(1.0)
    assert await store.bucket_take(take(name="model:y:requests", amount=3, now=T0)) == 0.0  # its own


async def test_a_forced_take_leaves_a_debt_and_a_negative_one_gives_back(store):
    assert await store.bucket_take(take(amount=3)) == 0.0
    # Forced: taken, and the answer is when the debt is paid off (a reservation's turn).
    assert await store.bucket_take(take(amount=2, force=True)) == pytest.approx(2.0)  # level -2
    assert await store.bucket_take(take(now=T0 + 1)) == pytest.approx(2.0)  # -1 now: 2 s to hold 1
    assert await store.bucket_take(take(amount=-2, force=True, now=T0 + 1)) == 0.0  # back to 1
    assert await store.bucket_take(take(now=T0 + 1)) == 0.0
    assert await store.bucket_take(take(amount=50, now=T0 + 10)) == 0.0  # over the capacity: a full one


async def test_concurrent_takes_never_grant_more_than_the_bucket_holds(store):
    slow = dict(capacity=5.0, refill_per_s=1e-9)  # no refill to speak of
    waits = await asyncio.gather(*(store.bucket_take(take(**slow, name="race")) for _ in range(12)))
    assert sum(1 for wait in waits if wait == 0.0) == 5
