"""The completer: fenced finishes, batched.

Every run's end goes through here. Finishes that arrive while a batch is being written
are written together in the next one, so at low load a finish costs one round trip and
at high load one round trip serves hundreds of runs. A store that blinks is retried
with backoff: a run is never failed because the database was briefly away.

While a worker has a backlog, a batch also waits a little for the runs still going
(`gathering`): the runs one claim started end close together, and written together they
cost the database less a run than in the halves that otherwise alternate (each written
while the other runs). The wait ends as the last of them finishes, as the batch reaches
GATHER_BATCH, or once its oldest finish has waited `gather_s`; without a backlog nothing
waits, so a lone run's end is written at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Callable

from ..core._resilience import through_blinks, unless_cancelled
from ..core._waiting import wait_set
from ..errors import LeaseLost, StoreError
from ..runs import Run
from ..store._interface import Store
from ..store._params import RunClaimParams, RunFinishParams

__all__ = ["Completer"]

MAX_BATCH = 1000
# A batch gathering the runs still going stops waiting at this many finishes: written
# together, 40 runs cost the database 81 µs a run and 200 cost 58 (PostgreSQL, measured),
# so more gains little, and the runs still going then overlap the write instead.
GATHER_BATCH = 100


class Completer:
    """`claim_along`, asked before each batch, gives the claim to write with it (None:
    the batch claims nothing); `claimed` is told once a batch what that claim brought,
    as soon as it landed or failed (None and [], once the batch is written, when there
    was none). A worker with a backlog claims this way for the slots its finishing runs
    free: one write where there were two. `gathering` says whether a batch may wait for
    runs still going (see the module's doc), for `gather_s` at most."""

    def __init__(self, store: Store, on_batch: Callable[[float], None] = lambda _s: None,
                 claim_along: Callable[[], RunClaimParams | None] = lambda: None,
                 claimed: Callable[[RunClaimParams | None, list[Run]], None] = lambda _c, _r: None,
                 gathering: Callable[[], bool] = lambda: False, gather_s: float = 0.0) -> None:
        self._store = store
        self._gathering = gathering
        self._gather_s = gather_s
        self._first_in = 0.0  # when the oldest pending finish came
        self._on_batch = on_batch  # the seconds one batch took to be durable
        self._claim_along = claim_along
        self._claimed = claimed
        self._flushing = False
        self._pending: list[tuple[RunFinishParams, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()
        self._closed = False
        # The loop, found once: on Python 3.11 each get_running_loop() is a getpid()
        # system call (1.6 a run in a worker, measured), a finish would pay one.
        self._loop: asyncio.AbstractEventLoop | None = None

    async def finish(self, params: RunFinishParams) -> None:
        """Write this finish and return once it is durable; raise LeaseLost if its fence
        was refused (a newer claim owns the run: nothing of ours was written)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((params, future))
        if len(self._pending) == 1:
            self._first_in = loop.time()
            self._wake.set()
        elif len(self._pending) >= GATHER_BATCH or not self._gathering():
            self._wake.set()  # what ends a gathering: while it lasts, a finish wakes nothing
        # Not shielded (a shield is a future and a callback more per run): a cancel here
        # cancels only this future; the finish stays in its batch and is written anyway,
        # and _flush skips answering a future that is done.
        if not await future:
            raise LeaseLost(params.run_id, params.fence)

    async def run(self) -> None:
        """The side task: flush batches until `close()`, then what is pending, and return.
        A flag, not a cancel, ends it: a cancel that a store's client loses (redis-py's
        sends go through 3.11's wait_for) would leave it waiting, and the worker's stop
        with it. Cancelled all the same (the worker torn down), it flushes first."""
        try:
            while not self._closed:
                await self._wake.wait()
                self._wake.clear()
                while self._pending:
                    await self._gather()
                    await self._flush()
        except asyncio.CancelledError:
            while self._pending:
                await self._flush()
            raise

    async def _gather(self) -> None:
        """Wait while `gathering` says so and the batch is short of GATHER_BATCH, until its
        oldest finish has waited `gather_s` (see the module's doc)."""
        loop = self._loop
        while (loop is not None and not self._closed and len(self._pending) < GATHER_BATCH
               and self._gathering()):
            left = self._first_in + self._gather_s - loop.time()
            if left <= 0:
                return
            self._wake.clear()
            await wait_set(self._wake, left)

    @property
    def busy(self) -> bool:
        """Finishes wait or are being written: a batch is coming, which may claim."""
        return self._flushing or bool(self._pending)

    def close(self) -> None:
        """Stop `run` once every finish handed in so far is written."""
        self._closed = True
        self._wake.set()

    async def _flush(self) -> None:
        batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        self._flushing = True
        try:
            began = time.monotonic()
            refused = set(await self._write([params for params, _ in batch]))
            self._on_batch(time.monotonic() - began)
        finally:
            self._flushing = False
        for params, future in batch:
            if not future.done():
                future.set_result(params.run_id not in refused)

    async def _write(self, batch: list[RunFinishParams]) -> list[int]:
        """The batch written, and `claimed` told once, as soon as the claim along with it
        (if any) landed or failed: its slots are not held while the finishes are retried."""
        claim = self._claim_along()
        if claim is not None:
            runs: list[Run] = []
            try:
                refused, runs = await self._store.run_finish_claim(batch, claim)
                return refused
            except StoreError as exc:
                unless_cancelled(exc)
                # The finishes are retried alone: a claim whose reply was lost may have
                # been made, and is not made twice (its runs come back as their leases end).
            finally:
                self._claimed(claim, runs)
        try:
            # No time limit: a finish is retried until the store answers; if that takes
            # past the lease, the fence refuses it and the run's new owner decides.
            return await through_blinks(self._store.run_finish_many, batch, limit_s=math.inf)
        finally:
            if claim is None:
                self._claimed(None, [])
