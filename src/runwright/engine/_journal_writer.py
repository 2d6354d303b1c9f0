"""Journal writes, batched: the steps of the runs in flight share one write.

A run writes its steps one at a time (a step goes on once its write is durable), so at
low load a step costs one round trip, and at high load the steps that arrive while a
write is in flight go together in the next one, as the completer does for finishes: a
hundred runs journaling at once cost the database one statement and one commit, not a
hundred. Each step is still judged alone (its own fence, its own position).

A batch holds one step per run, since each bumps its run's log once; a second step of the
same run (two steps awaited at once) goes in the next batch.
"""

from __future__ import annotations

import asyncio

from ..core._resilience import through_blinks
from ..store._interface import Store
from ..store._params import StepRecordParams

__all__ = ["JournalWriter"]

MAX_BATCH = 500

Waiting = tuple[StepRecordParams, "asyncio.Future[bool]"]


class JournalWriter:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._pending: list[Waiting] = []
        self._writing: asyncio.Task[None] | None = None

    async def record(self, params: StepRecordParams) -> bool:
        """Journal this step; True once it is durable, False if its fence was refused."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((params, future))
        writing = self._writing
        # A writer of a loop that has gone (a test's, a closed App's) writes no more.
        if writing is None or writing.done() or writing.get_loop() is not loop:
            self._writing = loop.create_task(self._write_all(), name="journal-writer")
        return await future

    async def _write_all(self) -> None:
        try:
            while self._pending:
                await self._write(self._next_batch())
        except BaseException:
            for _, future in self._pending:  # stopped (the loop is closing): nobody writes them
                future.cancel()
            self._pending = []
            raise

    def _next_batch(self) -> list[Waiting]:
        batch: list[Waiting] = []
        rest: list[Waiting] = []
        runs: set[int] = set()
        for waiting in self._pending:
            params, future = waiting
            if future.done():  # its run was cancelled before the write went out
                continue
            if params.run_id in runs or len(batch) >= MAX_BATCH:
                rest.append(waiting)
            else:
                runs.add(params.run_id)
                batch.append(waiting)
        self._pending = rest
        return batch

    async def _write(self, batch: list[Waiting]) -> None:
        if not batch:
            return
        try:
            answers = await through_blinks(self._store.step_record_many, [p for p, _ in batch])
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), recorded in zip(batch, answers):
            if not future.done():
                future.set_result(recorded)
