"""Thread operations: a conversation's history, cancelling its runs, and deleting it.

A thread is named within its tenant: tenant A's thread "t" and tenant B's "t" are two
histories. The store keys threads by (tenant, name); every call here passes the tenant
and never joins it into the name.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .errors import RunEnded, ThreadNotFound
from .following import MAX_OPEN_RUNS, OPEN_STATES, Follower
from .runs import Run
from .store.interface import Store
from .store.params import RunCancelParams, RunListParams, ThreadDeleteParams, ThreadMessagesParams

__all__ = ["Threads"]



class Threads:
    def __init__(self, store: Store, follower: Follower) -> None:
        self._store = store
        self._follower = follower

    async def history(self, thread: str, tenant: str | None) -> list[dict[str, Any]]:
        """The thread's messages, in order (ThreadDeleted once it was deleted)."""
        rows = await self._store.thread_messages(ThreadMessagesParams(thread, tenant=tenant))
        return [json.loads(message) for _, _, message in rows]

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
