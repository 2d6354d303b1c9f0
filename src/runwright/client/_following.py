"""The follower: a run's log page by page, and then live; and a run's end.

The one reader behind `RunHandle.events`, `App.events`, `App.wait_done`, `runwright
follow` and the server's SSE fan-out. It reads the backlog a page at a time until the
log is exhausted (never one page and a hope), then waits for a wake-up from the store's
hub (LISTEN/NOTIFY on PostgreSQL, the data-version poll on SQLite) with a slow re-read as
a safety net, short while the hub says it cannot deliver. Store calls that blink are
retried (`resilience.through_blinks`): a follower does not fail because the database did.

A follow ends when the run has ended and its log has been given up to its last event:
the run's state decides, not the look of one event (a dead run that is retried goes on
after its `dead` event).

`thread_events` follows a whole thread: every event of every run of it, numbered per
thread (`tseq`), resumable from one number; it never ends by itself, since a thread can
always get another run. It follows one thread, not one name: it holds the incarnation it
began with (see `ThreadInfo`), so once that thread is deleted, and after its name is
taken by a new thread, it raises ThreadDeleted instead of going on with the new one.

`TokenText` folds a streamed model call's `tokens` events the way every follower must:
a `tokens_reset` drops what its call streamed before it (a retried attempt's partial text).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import AsyncIterator, Iterable, TypeVar

from ..core._journal import Event, ThreadEvent
from ..core._payloads import ENVELOPE_FIELD, opened_data
from ..core._resilience import through_blinks
from ..core._waiting import wait_set
from ..errors import RunNotFound, StoreError
from ..runs import Run, RunState
from ..store import _rules as rules
from ..store._hub import QUEUED, done_topic, events_topic
from ..store._interface import Store
from ..store._params import EventListParams, RunListParams, ThreadEventListParams, ThreadGetParams

__all__ = ["EVENT_PAGE", "Follower", "TokenText"]

# Fallback re-read while waiting: covers a notification lost while the listener
# reconnected. Short while the hub says it cannot deliver notifications.
FALLBACK_S = 2.0
DEGRADED_S = 0.1
EVENT_PAGE = 1000
OPEN_STATES = (RunState.QUEUED, RunState.RUNNING)
MAX_OPEN_RUNS = 10_000


class Follower:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def page(self, run_id: int, after: int = 0, limit: int = EVENT_PAGE) -> list[Event]:
        """One page of the log: at most `limit` events with seq > `after`, in order."""
        return _opened(await through_blinks(self._store.event_list, EventListParams(run_id, after, limit)))

    async def backlog(self, run_id: int, after: int = 0) -> AsyncIterator[Event]:
        """Every event logged so far with seq > `after`, page after page, in order."""
        while batch := await self.page(run_id, after):
            for item in batch:
                yield item
            after = batch[-1].seq
            if len(batch) < EVENT_PAGE:
                return

    async def events(self, run_id: int, after: int = 0, follow: bool = True) -> AsyncIterator[Event]:
        """Events with seq > `after`, in order; with `follow`, what comes next too, until
        the run has ended and its last event was given. Gapless: the watch is open
        before each read, so an append between a read and the wait wakes the wait."""
        hub = self._store.hub
        with hub.watch(events_topic(run_id)) as grown:
            await self._store.listen()
            while True:
                grown.clear()
                async for item in self.backlog(run_id, after):
                    yield item
                    after = item.seq
                if not follow or await self._ended_at(run_id, after):
                    return
                await _wait(grown, hub.degraded)

    async def thread_page(self, thread: str, tenant: str | None, after: int = 0,
                          limit: int = EVENT_PAGE, incarnation: int | None = None) -> list[ThreadEvent]:
        """One page of a thread's log: at most `limit` events with tseq > `after` (of
        that incarnation of the thread, when given: else ThreadDeleted)."""
        return _opened(await through_blinks(self._store.thread_event_list,
                                            ThreadEventListParams(thread, tenant, after, limit, incarnation)))

    async def thread_incarnation(self, thread: str, tenant: str | None,
                                 incarnation: int | None = None) -> int:
        """The incarnation of the thread a reader reads under that name: `incarnation`
        if the name still names it, the current one when None (ThreadNotFound when
        there is none, ThreadDeleted for a tombstone or another incarnation)."""
        found = await through_blinks(self._store.thread_get, ThreadGetParams(thread, tenant))
        rules.check_thread_readable(thread, found, incarnation, missing_ok=False)
        assert found is not None
        return found.incarnation

    async def thread_events(self, thread: str, tenant: str | None, after: int = 0, follow: bool = True,
                            incarnation: int | None = None) -> AsyncIterator[ThreadEvent]:
        """The thread's events with tseq > `after`, in order; with `follow`, what comes
        next too, for as long as the caller reads. Woken by the events of the thread's
        open runs; while it has none, by any submission (a new run may be the thread's).
        Of one incarnation: the one given, else the thread's as the follow begins."""
        hub = self._store.hub
        await self._store.listen()
        incarnation = await self.thread_incarnation(thread, tenant, incarnation)
        while True:
            open_runs = await through_blinks(self._store.run_list, RunListParams(
                states=OPEN_STATES, thread=thread, tenant=tenant, limit=MAX_OPEN_RUNS))
            topics = [events_topic(run.id) for run in open_runs] or [QUEUED]
            with hub.watch(*topics) as grown:
                while batch := await self.thread_page(thread, tenant, after, incarnation=incarnation):
                    for item in batch:
                        yield item
                        after = item.tseq
                    if len(batch) < EVENT_PAGE:
                        break
                if not follow:
                    return
                await _wait(grown, hub.degraded)

    async def wait_done(self, run_id: int) -> Run:
        """The run once it has ended, woken by the store's notifications."""
        hub = self._store.hub
        with hub.watch(done_topic(run_id)) as changed:
            await self._store.listen()
            while True:
                changed.clear()
                try:
                    run = await self._store.run_get(run_id)
                except StoreError:
                    await asyncio.sleep(DEGRADED_S)  # a blink: wait it out, don't fail
                    continue
                if run is None:
                    raise RunNotFound(f"run {run_id} not found")
                if run.done:
                    return run
                await _wait(changed, hub.degraded)

    async def _ended_at(self, run_id: int, after: int) -> bool:
        """True when the run has ended and `after` is its last event (nothing will come)."""
        run = await through_blinks(self._store.run_get, run_id)
        if run is None:
            raise RunNotFound(f"run {run_id} not found")
        return run.done and run.last_seq <= after


async def _wait(woken: asyncio.Event, degraded: bool) -> None:
    await wait_set(woken, DEGRADED_S if degraded else FALLBACK_S)


class TokenText:
    """The text streamed so far by the model calls of the events folded in.

    A `tokens` event adds its text to its call (`call`: the model call's journal position,
    of its run); a `tokens_reset` event drops what its call streamed before it: an attempt
    that broke mid-stream, or the work of an owner that died, is void. So once a call's
    `model` event is logged its text equals the final message's content, whatever was
    retried. Other events are ignored; feed events in log order (what `run.events()`
    gives, also resumed with `after=`)."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._calls: dict[tuple[int, int], list[str]] = {}
        for item in events:
            self.add(item)

    def add(self, event: Event) -> bool:
        """Fold one event in; True when it was a `tokens` or `tokens_reset` event."""
        if event.kind not in ("tokens", "tokens_reset"):
            return False
        call = (event.run_id, int(event.data.get("call", -1)))
        if event.kind == "tokens_reset":
            self._calls[call] = []
        else:
            self._calls.setdefault(call, []).append(str(event.data.get("text", "")))
        return True

    def call_text(self, run_id: int, call: int) -> str:
        """The text of one model call (its journal position in run `run_id`)."""
        return "".join(self._calls.get((run_id, call), ()))

    @property
    def text(self) -> str:
        """Every call's text, in the order the calls first streamed."""
        return "".join("".join(parts) for parts in self._calls.values())


E = TypeVar("E", bound=Event)


def _opened(page: list[E]) -> list[E]:
    """The page with each event's data as emitted: an envelope (payload codecs) opened here,
    where the store's rows become what every follower reads. A page with none is itself."""
    if not any(type(e.data) is dict and ENVELOPE_FIELD in e.data for e in page):
        return page
    return [dataclasses.replace(e, data=opened_data(e.data)) for e in page]
