"""The fleet's bus, on every backend (`store.bus(root)`): slots with generations, rows
with a TTL read with the store's clock, and messages to every process of a root.

The fleet decides everything else (`runwright.fleet`); these are the promises it builds
on. Each scenario uses roots of its own, so scenarios never meet on a shared database.
"""

from __future__ import annotations

import itertools
import os
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import pytest

from runwright.errors import InvalidInput
from runwright.store._bus import MAX_MESSAGE_BYTES, Bus, Life, State, Writing, encode

from ..process.harness import wait_until

LONG_TTL_S = 60.0  # outlives any scenario: the row ends only when the scenario ends it
SHORT_TTL_S = 0.3  # ends while the scenario waits for it
_probes = itertools.count()


def _root() -> str:
    return f"conformance-{uuid.uuid4().hex[:12]}:v1"


def writing(ttl_s: float = LONG_TTL_S, state: State = State.RESYNCING, drain_s: float = 0.0) -> Writing:
    return Writing(state=state, host="test-host", pid=os.getpid(), drain_s=drain_s, ttl_s=ttl_s)


@asynccontextmanager
async def opened(store, root: str) -> AsyncIterator[Bus]:
    bus = store.bus(root)
    await bus.open()
    try:
        yield bus
    finally:
        await bus.close()


async def _claim_when_free(bus: Bus, kind: str, ordinal: int) -> int:
    """The generation of a claim taken as soon as the slot's row has expired."""
    return await wait_until(lambda: bus.slot_claim(kind, ordinal, writing()),
                            f"{kind}-{ordinal}'s row expires and the slot can be claimed")


async def _ended(bus: Bus, kind: str, ordinal: int) -> bool:
    return (await bus.census()).holder(kind, ordinal) is None


async def test_a_claim_gives_a_generation_and_a_live_row_keeps_its_slot(store):
    root = _root()
    async with opened(store, root) as bus, opened(store, root) as other:
        generation = await bus.slot_claim("worker", 1, writing())
        assert isinstance(generation, int) and generation >= 1
        # Held by a live row: refused to every process of the root, its own too.
        assert await other.slot_claim("worker", 1, writing()) is None
        assert await bus.slot_claim("worker", 1, writing()) is None
        assert await other.slot_claim("worker", 2, writing()) is not None
        assert await other.slot_claim("server", 1, writing()) is not None
        holder = (await bus.census()).holder("worker", 1)
        assert holder is not None and holder.generation == generation
    async with opened(store, _root()) as elsewhere:  # another root's slot is its own
        assert await elsewhere.slot_claim("worker", 1, writing()) is not None


async def test_a_claim_after_the_row_expired_or_was_deleted_bumps_the_generation(store):
    async with opened(store, _root()) as bus:
        first = await bus.slot_claim("worker", 1, writing(ttl_s=SHORT_TTL_S))
        assert first is not None
        second = await _claim_when_free(bus, "worker", 1)
        assert second == first + 1
        await bus.presence_delete(Life("worker", 1, second))
        assert await bus.slot_claim("worker", 1, writing()) == second + 1


async def test_a_refresh_rewrites_a_live_row_and_extends_its_ttl(store):
    async with opened(store, _root()) as bus:
        generation = await bus.slot_claim("worker", 1, writing(ttl_s=5.0))
        assert generation is not None
        before = (await bus.census()).holder("worker", 1)
        assert before is not None and before.state is State.RESYNCING
        life = Life("worker", 1, generation)
        assert await bus.presence_refresh(life, writing(state=State.RECYCLING, drain_s=7.5))
        after = (await bus.census()).holder("worker", 1)
        assert after is not None and after.life == life
        assert (after.state, after.drain_s) == (State.RECYCLING, 7.5)
        assert after.heartbeat_at >= before.heartbeat_at and after.expires_at > before.expires_at
        assert after.claimed_at == pytest.approx(before.claimed_at, abs=1e-3)


async def test_a_refresh_of_an_ended_life_is_refused_and_resurrects_nothing(store):
    async with opened(store, _root()) as bus:
        expired = await bus.slot_claim("worker", 1, writing(ttl_s=SHORT_TTL_S))
        assert expired is not None
        await wait_until(lambda: _ended(bus, "worker", 1), "worker-1's row expires")
        assert not await bus.presence_refresh(Life("worker", 1, expired), writing())
        assert await _ended(bus, "worker", 1)  # its row past the TTL stays ended

        newer = await bus.slot_claim("worker", 1, writing())
        assert newer == expired + 1
        # A newer generation holds the slot: the old life has ended, and changes nothing.
        assert not await bus.presence_refresh(Life("worker", 1, expired), writing(state=State.READY))
        holder = (await bus.census()).holder("worker", 1)
        assert holder is not None and (holder.generation, holder.state) == (newer, State.RESYNCING)
        assert await bus.presence_refresh(Life("worker", 1, newer), writing(state=State.READY))

        deleted = await bus.slot_claim("worker", 2, writing())
        assert deleted is not None
        await bus.presence_delete(Life("worker", 2, deleted))
        assert not await bus.presence_refresh(Life("worker", 2, deleted), writing())
        assert await _ended(bus, "worker", 2)


async def test_a_delete_removes_only_its_own_life(store):
    async with opened(store, _root()) as bus:
        old = await bus.slot_claim("worker", 1, writing())
        assert old is not None
        await bus.presence_delete(Life("worker", 1, old))
        assert await _ended(bus, "worker", 1)
        await bus.presence_delete(Life("worker", 1, old))  # twice: still nothing to remove
        current = await bus.slot_claim("worker", 1, writing())
        assert current == old + 1
        await bus.presence_delete(Life("worker", 1, old))  # another life's slot now: a no-op
        await bus.presence_delete(Life("worker", 1, current + 1))  # nor one never claimed
        await bus.presence_delete(Life("worker", 2, current))  # nor a slot never claimed
        holder = (await bus.census()).holder("worker", 1)
        assert holder is not None and holder.generation == current
        await bus.presence_delete(Life("worker", 1, current))
        assert await _ended(bus, "worker", 1)


async def test_a_census_lists_the_rows_of_its_root_with_the_stores_clock(store):
    root = _root()
    async with opened(store, root) as bus, opened(store, _root()) as elsewhere:
        empty = await bus.census()
        assert empty.rows == [] and empty.live() == []
        assert empty.now == pytest.approx(store.clock(), abs=5.0)

        worker = await bus.slot_claim("worker", 2, writing(ttl_s=30.0, drain_s=1.5))
        server = await bus.slot_claim("server", 1, writing(ttl_s=30.0))
        assert await elsewhere.slot_claim("worker", 1, writing()) is not None
        census = await bus.census()
        assert census.now == pytest.approx(store.clock(), abs=5.0)
        rows = census.live()
        assert [(r.name, r.generation) for r in rows] == [("server-1", server), ("worker-2", worker)]
        row = rows[1]
        assert (row.kind, row.ordinal, row.state, row.host, row.pid, row.drain_s) == (
            "worker", 2, State.RESYNCING, "test-host", os.getpid(), 1.5)
        # Times are the store's clock, as `now` is: written at the claim, 30 s to live.
        assert row.claimed_at <= census.now and row.heartbeat_at <= census.now
        assert census.now - row.claimed_at < 5.0
        assert row.expires_at - row.heartbeat_at == pytest.approx(30.0, abs=0.5)


class Heard:
    """What one subscriber was delivered, and whether its subscription ever dropped."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.hearing: list[bool] = []

    def ids(self, kind: str) -> list[Any]:
        return [m["id"] for m in self.messages if m.get("kind") == kind]


async def _subscribed(bus: Bus) -> Heard:
    heard = Heard()
    await bus.subscribe(heard.messages.append, heard.hearing.append)
    return heard


async def _all_hear(publisher: Bus, listeners: list[Heard]) -> None:
    """Until every listener has heard a probe of `publisher`'s: delivery is a hint, and
    a subscription may take effect a moment after `subscribe` returns (Redis's)."""

    async def probe() -> bool:
        await publisher.publish({"type": "op", "id": f"probe-{next(_probes)}", "kind": "probe",
                                 "root": publisher.root})
        return all(heard.ids("probe") for heard in listeners)

    await wait_until(probe, "every subscriber hears a probe", interval_s=0.1)


async def test_every_message_reaches_every_subscriber_of_its_root_and_no_other(store):
    root = _root()
    async with opened(store, root) as a, opened(store, root) as b, opened(store, _root()) as c:
        heard_a, heard_b, heard_c = [await _subscribed(bus) for bus in (a, b, c)]
        await a.subscribe(lambda message: None, lambda up: None)  # idempotent: changes nothing
        await _all_hear(a, [heard_a, heard_b])
        await _all_hear(b, [heard_a, heard_b])
        await _all_hear(c, [heard_c])

        sent = []
        for n in range(5):
            sender = (a, b)[n % 2]
            message = {"type": ("op", "reply")[n % 2], "id": f"m{n}", "kind": "message", "root": root,
                       "payload": {"n": n, "text": "ünïcode ✓"}}
            await sender.publish(message)
            sent.append(message)
        await a.publish({"type": "not-ours", "id": "foreign", "kind": "message", "root": root})
        await a.publish({"type": "op", "id": "end", "kind": "marker", "root": root})
        # Sent last: once c has it, what the other root sent before it had its chance.
        await c.publish({"type": "op", "id": "end", "kind": "marker", "root": c.root})

        for heard in (heard_a, heard_b):
            await wait_until(lambda heard=heard: heard.ids("marker"), "the root's last message arrives")
            # Every one, in the order sent; not the one that is not a fleet message.
            assert [m for m in heard.messages if m["kind"] == "message"] == sent
            assert {m["root"] for m in heard.messages} == {root}
        await wait_until(lambda: heard_c.ids("marker"), "the other root's marker arrives")
        assert {m["root"] for m in heard_c.messages} == {c.root} != {root}
        assert heard_a.hearing == heard_b.hearing == heard_c.hearing == []  # never dropped


async def test_a_message_over_the_size_every_bus_carries_is_refused(store):
    base = {"type": "op", "id": "big", "kind": "size", "pad": ""}
    fits = {**base, "pad": "a" * (MAX_MESSAGE_BYTES - len(encode(base).encode()))}
    assert len(encode(fits).encode()) == MAX_MESSAGE_BYTES
    over = {**base, "pad": "a" * (MAX_MESSAGE_BYTES - len(encode(base).encode()) + 1)}
    wide = {**base, "pad": "é" * (MAX_MESSAGE_BYTES // 2)}  # fewer characters than bytes
    for refused in (over, wide):
        with pytest.raises(InvalidInput, match=f"at most {MAX_MESSAGE_BYTES} bytes"):
            encode(refused)
    async with opened(store, _root()) as bus:
        heard = await _subscribed(bus)
        await _all_hear(bus, [heard])
        for refused in (over, wide):
            with pytest.raises(InvalidInput, match=f"at most {MAX_MESSAGE_BYTES} bytes"):
                await bus.publish(refused)
        await bus.publish(fits)  # the largest every backend carries (NOTIFY's limit, with room)
        await wait_until(lambda: heard.ids("size"), "the largest message arrives")
        assert [m["pad"] for m in heard.messages if m["kind"] == "size"] == [fits["pad"]]
