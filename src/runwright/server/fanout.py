"""One reader of a run's log shared by all of the server's SSE followers of that run.

Without it every follower polls the store on every wake-up, so a hundred dashboards on
one run make a hundred reads per event. With it, one live reader per followed run feeds
each follower's queue. A follower subscribes first, then reads its backlog from the
store, then takes the live feed, skipping what the backlog already gave: subscribing
before reading is what leaves no gap between the two.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, AsyncIterator

if TYPE_CHECKING:
    from ..app import App
    from ..journal import Event

from ..store.params import EventListParams

__all__ = ["Broadcaster"]

_END = None  # put on every queue when the shared reader stops


class _Feed:
    def __init__(self) -> None:
        self.queues: set[asyncio.Queue[Event | None]] = set()
        self.task: asyncio.Task[None] | None = None


class Broadcaster:
    def __init__(self, app: App) -> None:
        self._app = app
        self._feeds: dict[int, _Feed] = {}

    async def follow(self, run_id: int, after: int) -> AsyncIterator[Event]:
        """The run's events after `after`, gapless, until its terminal event."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        feed = self._subscribe(run_id, queue, after)
        try:
            last = after
            for item in await self._app.store.event_list(EventListParams(run_id, after)):
                yield item
                last = item.seq
                if item.terminal:
                    return
            while (item := await queue.get()) is not _END:
                if item.seq > last:
                    yield item
                    last = item.seq
                    if item.terminal:
                        return
            # The shared reader ended (the run ended, or the reader failed): finish alone.
            async for item in self._app.events(run_id, after=last):
                yield item
        finally:
            feed.queues.discard(queue)
            if not feed.queues and feed.task is not None:
                feed.task.cancel()
                self._feeds.pop(run_id, None)

    def _subscribe(self, run_id: int, queue: asyncio.Queue[Event | None], after: int) -> _Feed:
        feed = self._feeds.get(run_id)
        if feed is None or feed.task is None or feed.task.done():
            feed = self._feeds[run_id] = _Feed()
            feed.task = asyncio.get_running_loop().create_task(self._read(run_id, feed, after))
        feed.queues.add(queue)
        return feed

    async def _read(self, run_id: int, feed: _Feed, after: int) -> None:
        try:
            async for item in self._app.events(run_id, after=after):
                for queue in list(feed.queues):
                    queue.put_nowait(item)
        finally:
            for queue in list(feed.queues):
                queue.put_nowait(_END)
