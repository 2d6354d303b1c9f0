"""One live reader of a run's log shared by all of the server's SSE followers of that run.

Without it every follower polls the store on every wake-up, so a hundred dashboards on
one run make a hundred reads per event. With it, one live reader per followed run feeds
each follower's queue. A follower subscribes first, then reads its whole backlog from
the store (page by page, through the App's follower), then takes the live feed, skipping
what the backlog already gave: subscribing before reading is what leaves no gap. When
the shared reader stops (the run ended, or the reader failed), each follower finishes
alone through the same follower, which decides when a log is over: one rule for all.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, AsyncIterator

if TYPE_CHECKING:
    from ..app import App
    from ..core._journal import Event

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
        """The run's events after `after`, gapless, until the run has ended and its log
        has been given whole."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        feed = self._subscribe(run_id, queue, after)
        try:
            last = after
            async for item in self._app.events(run_id, after=after, follow=False):
                yield item
                last = item.seq
            while (live := await queue.get()) is not _END:
                if live.seq > last:
                    yield live
                    last = live.seq
            async for item in self._app.events(run_id, after=last):
                yield item
        finally:
            self._unsubscribe(run_id, feed, queue)

    def _subscribe(self, run_id: int, queue: asyncio.Queue[Event | None], after: int) -> _Feed:
        feed = self._feeds.get(run_id)
        if feed is None or feed.task is None or feed.task.done():
            feed = self._feeds[run_id] = _Feed()
            feed.task = asyncio.get_running_loop().create_task(self._read(run_id, feed, after))
        feed.queues.add(queue)
        return feed

    def _unsubscribe(self, run_id: int, feed: _Feed, queue: asyncio.Queue[Event | None]) -> None:
        feed.queues.discard(queue)
        if not feed.queues and feed.task is not None:
            feed.task.cancel()
            if self._feeds.get(run_id) is feed:
                self._feeds.pop(run_id, None)

    async def _read(self, run_id: int, feed: _Feed, after: int) -> None:
        try:
            async for item in self._app.events(run_id, after=after):
                for queue in list(feed.queues):
                    queue.put_nowait(item)
        finally:
            for queue in list(feed.queues):
                queue.put_nowait(_END)
