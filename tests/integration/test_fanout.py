"""The server's shared reader: many followers of one run, each gapless, joining at any time."""

from __future__ import annotations

import asyncio

import runwright as rw
from runwright.server._fanout import Broadcaster
from runwright.store._params import EventAppendParams, EventListParams

from .conftest import running_worker


async def test_followers_joining_at_any_moment_all_get_the_whole_log(app):
    gate = asyncio.Event()

    @app.task
    async def chatter(ctx: rw.Context, count: int) -> int:
        for i in range(count):
            await ctx.emit("tick", {"i": i})
            if i == count // 2:
                await gate.wait()
        return count

    broadcaster = Broadcaster(app)

    async def follow(after: int) -> list[int]:
        return [item.seq async for item in broadcaster.follow(handle.id, after)]

    async with running_worker(app):
        handle = await app.submit(chatter, 40)
        early = [asyncio.create_task(follow(0)) for _ in range(10)]
        async for item in handle.events():  # half-way: the run waits at its gate
            if item.kind == "tick" and item.data["i"] == 20:
                break
        late = [asyncio.create_task(follow(after)) for after in (0, 5, 22)]
        gate.set()
        results = await asyncio.gather(*early, *late)
    log = [e.seq for e in await app.store.event_list(EventListParams(handle.id))]
    for got in results[:11]:
        assert got == log
    assert results[11] == log[5:] and results[12] == log[22:]


async def test_followers_joining_behind_each_other_over_many_pages_each_get_every_event(app):
    """1500 events: A joins at after=1400, then B at after=0 (through the server's shared
    reader, and through the library). Each sees every event once, in order."""
    gate = asyncio.Event()
    logged = asyncio.Event()

    @app.task
    async def chatter(ctx: rw.Context) -> None:
        # 1 submitted + 1 started + 1497 ticks + 1 succeeded = 1500 events.
        await ctx.runtime.store.event_append(EventAppendParams(
            ctx.run_id, ctx.fence, [("tick", "{}")] * 1497))
        logged.set()
        await gate.wait()

    broadcaster = Broadcaster(app)
    seen: dict[str, list[int]] = {"A": [], "B": [], "library": []}
    first_seen = asyncio.Event()

    async def follow(name: str, after: int) -> None:
        async for item in broadcaster.follow(handle.id, after):
            seen[name].append(item.seq)
            first_seen.set()

    async def follow_library() -> None:
        seen["library"] = [item.seq async for item in app.events(handle.id, after=0)]

    async with running_worker(app):
        handle = await app.submit(chatter)
        await asyncio.wait_for(logged.wait(), 30)
        a = asyncio.create_task(follow("A", 1400))
        await asyncio.wait_for(first_seen.wait(), 30)  # A's shared reader is live
        b = asyncio.create_task(follow("B", 0))
        library = asyncio.create_task(follow_library())
        gate.set()
        await asyncio.wait_for(asyncio.gather(a, b, library), 60)
    assert seen["A"] == list(range(1401, 1501))
    assert seen["B"] == list(range(1, 1501))
    assert seen["library"] == list(range(1, 1501))
