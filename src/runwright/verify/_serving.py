"""The workers' side of `runwright verify --fleet`: fleet ops a worker applies for a verify
session, registered in every App through `fleet.on` (see `hooks`).

- `verify-serve {"queue", "for_s"}`: serve the session's queue (`runwright.verify.<id>`)
  besides its own (`Member.serve_extra`), for `for_s` seconds on this process's clock
  (verify renews it every few seconds; a verify that died stops being served when it
  lapses). The reply says whether this process obeys faults, and its lease (a stall must
  outlast it). Refused for a session that ended: its queue is paused in the store (a
  renewal that reached a stalled worker late); and by an app without verify's workload;
- `verify-release {"queue"}`: stop serving it now;
- `verify-fault {"queue", "kind", "stall_s"}`: a fault, obeyed only by a worker started
  with `--allow-verify-faults` (RUNWRIGHT_VERIFY_FAULTS=1) that serves that queue, so that
  whoever can reach the bus cannot kill a fleet that did not opt in:
    die    SIGKILL itself, just after its reply: its supervisor is to start it again;
    stall  block its event loop for `stall_s` (past its lease), as SIGSTOP would, then go on;
           on SQLite, outside a transaction of its own (or every writer would wait on it);
    blip   terminate its own database sessions (PostgreSQL sessions named
           `runwright:<schema>:<pid>` and its bus's, Redis clients named likewise); SQLite
           has none: refused there.

Each acts just after its reply (DEFER_S), so the report reads `applied`, not `missing`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any, Coroutine

from ..errors import InvalidInput, StoreError
from ..observe._logs import event
from ._tasks import TASKS

if TYPE_CHECKING:
    from ..fleet import Fleet, Member
    from ..fleet._member import Handler
    from ..tasks._registry import Registry

__all__ = ["FAULTS_ENV", "QUEUE_PREFIX", "VERIFY_OPS", "VerifyOps", "faults_allowed"]

VERIFY_OPS = ("verify-fault", "verify-release", "verify-serve")
FAULTS_ENV = "RUNWRIGHT_VERIFY_FAULTS"
QUEUE_PREFIX = "runwright.verify."
FAULT_KINDS = ("blip", "die", "stall")
MAX_SERVE_S = 300.0
MAX_STALL_S = 300.0
DEFER_S = 0.3
WARNING = logging.WARNING


def faults_allowed() -> bool:
    """Whether this process obeys verify's faults: RUNWRIGHT_VERIFY_FAULTS=1 (which
    `runwright worker --allow-verify-faults` sets)."""
    return os.environ.get(FAULTS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class VerifyOps:
    """The handlers, over the App's fleet (its store, and the process's member once it
    joined) and its registry."""

    def __init__(self, fleet: Fleet, registry: Registry) -> None:
        self.store = fleet.store
        self._fleet = fleet
        self._registry = registry
        self.faults = faults_allowed()
        self._acting: set[asyncio.Task[None]] = set()

    def handlers(self) -> dict[str, Handler]:
        return {"verify-serve": self.serve, "verify-release": self.release, "verify-fault": self.fault}

    def _worker(self) -> Member:
        member = self._fleet.member
        if member is None or member.kind != "worker":
            raise RuntimeError("only a worker serves a verify session")
        if not set(TASKS) <= set(self._registry.tasks):
            raise RuntimeError("this app does not register verify's workload (builtin_jobs=False)")
        return member

    async def serve(self, payload: dict[str, Any]) -> dict[str, Any]:
        member = self._worker()
        queue = _queue(payload)
        for_s = payload.get("for_s")
        if not isinstance(for_s, (int, float)) or not 0 < for_s <= MAX_SERVE_S:
            raise InvalidInput(f"verify-serve: for_s is 0 < seconds <= {MAX_SERVE_S:g}, got {for_s!r}")
        try:
            member.paused = await self.store.queue_list_paused(member.settings.root)
        except StoreError:
            pass  # as last read: the store's claim skips a paused queue anyway
        if queue in member.paused:
            raise RuntimeError(f"verify session {queue} has ended (its queue is paused)")
        member.serve_extra(queue, float(for_s))
        return {"queue": queue, "faults": self.faults, "lease_s": member.lease_s, "pid": os.getpid()}

    def release(self, payload: dict[str, Any]) -> dict[str, Any]:
        member = self._worker()
        return {"released": member.stop_extra(_queue(payload))}

    def fault(self, payload: dict[str, Any]) -> dict[str, Any]:
        member = self._worker()
        if not self.faults:
            raise PermissionError(f"this worker does not obey verify's faults (start it with "
                                  f"--allow-verify-faults, or {FAULTS_ENV}=1)")
        queue, kind = _queue(payload), payload.get("kind")
        if queue not in member.extra_queues():
            raise RuntimeError(f"this worker does not serve {queue}: it takes no fault of it")
        if kind == "die":
            event(WARNING, "verify fault: dying (SIGKILL)", queue=queue)
            asyncio.get_running_loop().call_later(DEFER_S, os.kill, os.getpid(), signal.SIGKILL)
            return {"kind": kind}
        if kind == "stall":
            stall_s = payload.get("stall_s")
            if not isinstance(stall_s, (int, float)) or not 0 < stall_s <= MAX_STALL_S:
                raise InvalidInput(f"verify-fault stall: stall_s is 0 < seconds <= {MAX_STALL_S:g}")
            self._later(self._stall(float(stall_s)))
            return {"kind": kind, "stall_s": stall_s}
        if kind == "blip":
            if not self.store.has_sessions:
                raise RuntimeError("SQLite has no database sessions to cut")
            self._later(self._blip())
            return {"kind": kind}
        raise InvalidInput(f"verify-fault: kind is one of {', '.join(FAULT_KINDS)}, got {kind!r}")

    def _later(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._acting.add(task)
        task.add_done_callback(self._acting.discard)

    async def _stall(self, stall_s: float) -> None:
        await asyncio.sleep(DEFER_S)
        between = getattr(self.store, "between_transactions", None)
        event(WARNING, "verify fault: stalling the event loop", stall_s=stall_s)
        if between is None:
            _block(stall_s)
        else:
            async with between():
                _block(stall_s)

    async def _blip(self) -> None:
        await asyncio.sleep(DEFER_S)
        cut = await self.store.sessions_cut()
        event(WARNING, "verify fault: own database sessions cut", sessions=cut)


def _block(seconds: float) -> None:
    """The whole event loop stops here, as a SIGSTOPped process does: no heartbeat, no
    renewal, no write; when it goes on, its claims may belong to another worker."""
    time.sleep(seconds)


def _queue(payload: dict[str, Any]) -> str:
    queue = payload.get("queue")
    if not isinstance(queue, str) or not queue.startswith(QUEUE_PREFIX) or len(queue) > 200:
        raise InvalidInput(f"a verify op names its session's queue {QUEUE_PREFIX}<id>, got {queue!r}")
    return queue
