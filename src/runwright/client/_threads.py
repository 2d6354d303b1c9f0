"""Thread operations: a conversation's history, cancelling its runs, and deleting it.

A thread is named within its tenant: tenant A's thread "t" and tenant B's "t" are two
histories. The store keys threads by (tenant, name); every call here passes the tenant
and never joins it into the name.

A name may be borne by several threads in turn: once a deleted thread's tombstone is
reclaimed by retention, a new thread may take its name. Each has its own incarnation
(`ThreadInfo.incarnation`); a reader that holds one (a `ThreadHandle` once it has read
the thread, a follower of the thread) is told ThreadDeleted when the name names another,
never shown the new thread as the continuation of its own. A read by bare name reads the
thread that bears the name now.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Protocol

from ..core._journal import ThreadEvent
from ..core._payloads import load
from ..errors import RunEnded, ThreadNotFound
from ..runs import Run
from ..store import _rules as rules
from ..store._interface import Store
from ..store._params import (
    RunCancelParams,
    RunListParams,
    ThreadCursor,
    ThreadDeleteParams,
    ThreadGetParams,
    ThreadInfo,
    ThreadMessagesParams,
)
from ._following import EVENT_PAGE, MAX_OPEN_RUNS, OPEN_STATES, Follower

__all__ = ["ThreadCursor", "ThreadHandle", "ThreadInfo", "ThreadReads", "Threads"]



class Threads:
    def __init__(self, store: Store, follower: Follower) -> None:
        self._store = store
        self._follower = follower

    async def info(self, thread: str, tenant: str | None, incarnation: int | None = None) -> ThreadInfo:
        """The thread that bears the name (ThreadNotFound before its first run,
        ThreadDeleted once deleted, or when it is not `incarnation`, if given)."""
        found = await self._store.thread_get(ThreadGetParams(thread, tenant))
        rules.check_thread_readable(thread, found, incarnation, missing_ok=False)
        assert found is not None
        return found

    async def history(self, thread: str, tenant: str | None,
                      incarnation: int | None = None) -> list[dict[str, Any]]:
        """The thread's messages, in order (ThreadNotFound before its first run, as every
        other read of a thread; ThreadDeleted once it was deleted, or when it is not
        `incarnation`, if given)."""
        rows = await self._store.thread_messages(ThreadMessagesParams(thread, tenant=tenant,
                                                                      incarnation=incarnation))
        if not rows and incarnation is None:
            # The store reads a missing thread as an empty history (a run reads its own
            # thread's before it has one); a reader is told there is no such thread.
            await self.info(thread, tenant)
        return [load(message) for _, _, message in rows]

    async def cancel(self, thread: str, tenant: str | None) -> list[Run]:
        """Cancel every run of the thread open now, newest first (so that no queued run
        starts when the one ahead of it ends); the thread and its history stay. A queued
        run ends `cancelled` at once, a running one stops within a second (as `cancel`).
        Returns the runs as the cancel left them; a run that ended meanwhile is left out."""
        out = []
        for run in await self._open_runs(thread, tenant):  # newest first
            try:
                out.append(await self._store.run_cancel(RunCancelParams(run.id)))
            except RunEnded:
                pass
        return sorted(out, key=lambda run: run.id)

    async def delete(self, thread: str, tenant: str | None, timeout_s: float | None) -> None:
        """Refuse new runs on the thread, cancel its open runs, wait for them to end, then
        delete its history. Reading it afterwards raises ThreadDeleted."""
        if not await self._store.thread_delete(ThreadDeleteParams(thread, tenant, purge=False)):
            raise ThreadNotFound(f"thread {thread!r} does not exist")
        open_runs = await self.cancel(thread, tenant)
        async with asyncio.timeout(timeout_s):
            for run in open_runs:
                await self._follower.wait_done(run.id)
        await self._store.thread_delete(ThreadDeleteParams(thread, tenant, purge=True))

    async def _open_runs(self, thread: str, tenant: str | None) -> list[Run]:
        # The store lists this tenant's thread only (None: the thread of no tenant).
        return await self._store.run_list(RunListParams(
            states=OPEN_STATES, thread=thread, tenant=tenant, limit=MAX_OPEN_RUNS))


class ThreadReads(Protocol):
    """What a handle reads a thread through: a scope (`RunScope`), which knows its tenant."""

    async def thread_info(self, thread: str, incarnation: int | None = None) -> ThreadInfo: ...

    async def thread_history(self, thread: str, incarnation: int | None = None) -> list[dict[str, Any]]: ...

    async def thread_events_page(self, thread: str, after: int = 0, limit: int = EVENT_PAGE,
                                 incarnation: int | None = None) -> list[ThreadEvent]: ...

    def follow_thread(self, thread: str, after: int = 0, follow: bool = True,
                      incarnation: int | None = None) -> AsyncIterator[ThreadEvent]: ...

    async def list_runs(self, *, thread: str | None = None, limit: int = 100,
                        before_id: int | None = None, incarnation: int | None = None) -> list[Run]: ...


class ThreadHandle:
    """One thread of a scope, read as one identity: the first read learns its
    incarnation, and every read after it is of that thread. Once that thread is
    deleted, and after its name is taken by a new thread, each read raises
    ThreadDeleted. Made by `app.thread(name)`; `incarnation` may be given (one read
    earlier, or from the HTTP API's `GET /threads/{thread}`)."""

    def __init__(self, scope: ThreadReads, name: str, incarnation: int | None = None) -> None:
        self._scope = scope
        self.name = name
        self.incarnation = incarnation

    def __repr__(self) -> str:
        return f"<ThreadHandle {self.name!r} incarnation={self.incarnation}>"

    async def info(self) -> ThreadInfo:
        """The thread as it stands (ThreadNotFound before its first run)."""
        found = await self._scope.thread_info(self.name, self.incarnation)
        self.incarnation = found.incarnation
        return found

    async def history(self) -> list[dict[str, Any]]:
        """Its messages, in order."""
        return await self._scope.thread_history(self.name, incarnation=await self._held())

    async def events_page(self, after: int = 0, limit: int = EVENT_PAGE) -> list[ThreadEvent]:
        """One page of its log: at most `limit` events with tseq > `after`."""
        return await self._scope.thread_events_page(self.name, after, limit, incarnation=await self._held())

    async def runs(self, limit: int = 100, before_id: int | None = None) -> list[Run]:
        """Its runs, newest first; `before_id` pages backwards."""
        return await self._scope.list_runs(thread=self.name, limit=limit, before_id=before_id,
                                           incarnation=await self._held())

    async def follow(self, after: int = 0, follow: bool = True) -> AsyncIterator[ThreadEvent]:
        """Its events with tseq > `after`, and with `follow` what comes next (see
        `RunScope.follow_thread`)."""
        held = await self._held()
        async for item in self._scope.follow_thread(self.name, after, follow, incarnation=held):
            yield item

    async def _held(self) -> int:
        if self.incarnation is None:
            await self.info()
        assert self.incarnation is not None
        return self.incarnation
