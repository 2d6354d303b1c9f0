"""The server's shared reader: many followers of one run, each gapless, joining at any time."""

from __future__ import annotations

import asyncio

import runwright as rw
from runwright.server.fanout import Broadcaster
from runwright.store.params import EventListParams

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
