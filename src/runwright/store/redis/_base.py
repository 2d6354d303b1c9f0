"""What the mixins of the Redis store share (see `store` for the keys and the scripts)."""

from __future__ import annotations

import asyncio
import enum
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

import redis.asyncio as aioredis

from ...core._clock import Clock, StoreClock
from ...core._journal import StepRecord
from ...errors import StoreError
from ...runs import Run
from .._hub import Hub
from .._liveness import Unmarked
from .._params import ThreadGetParams, ThreadInfo, WorkerInfo
from ._codec import arg
from ._errors import FAILURES, store_error
from ._keeper import LivenessKeeper
from ._scripts import Scripts

__all__ = ["LIST_CHUNK", "STALE", "RedisBase", "Stale", "due_key"]

LIST_CHUNK = 200
STALE_RETRIES = 50  # re-plans of a decision whose state changed under it, before giving up
T = TypeVar("T")


class Stale(enum.Enum):
    """What a decision's apply answers when the state it was read on changed (_decided)."""

    STALE = "stale"


STALE = Stale.STALE


class RedisBase:
    """What the concerns' mixins of `RedisStore` share: the attributes the store sets up
    (declared here for the type checker; `RedisStore.__init__` and `open` assign them), the
    call of a command or script, the decide-apply-retry loop, the store's clock."""

    hub: Hub
    clock: Clock
    prefix: str
    liveness_s: float
    _scripts: Scripts | None
    _client_url: str
    _keeper: LivenessKeeper | None
    _unmarked: Unmarked

    if TYPE_CHECKING:  # the store's own (_store.py), and one concern's that another reads
        @property
        def redis(self) -> aioredis.Redis: ...

        def key(self, name: str) -> str: ...

        @property
        def session_name(self) -> str: ...

        async def run_get(self, run_id: int) -> Run | None: ...

        async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]: ...

        async def step_list(self, run_id: int) -> list[StepRecord]: ...

        async def thread_get(self, params: ThreadGetParams) -> ThreadInfo | None: ...

        async def worker_list(self) -> list[WorkerInfo]: ...

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A Redis call whose failures read as the store's errors: a connection that is
        gone is StoreUnreachable (the engine retries it), anything else StoreError.

        A cancellation of the caller that the call swallowed is raised once it returns:
        redis-py sends each command under asyncio.wait_for (socket_timeout), which on
        Python 3.11 returns the send's result when the send ends as the task is cancelled
        and drops the cancel (CPython gh-86296). A worker cancels a run once; a run whose
        cancel was lost so ran on to its end (found by tests/process/
        test_cancel_family_race.py: a spawner, cancel requested, submitting for 28 s)."""
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            value = await fn(*args)
        except FAILURES as exc:
            raise store_error(exc) from exc
        if task is not None and task.cancelling() > cancels:
            raise asyncio.CancelledError()  # what the call did stands, as after any return
        return value

    async def _decided(self, attempt: Callable[[], Awaitable[T | Stale]], changing: str) -> T:
        """Read, decide (the rulebook, in Python), apply in a script that re-checks what the
        decision was made on: `attempt` does one round and answers STALE when the script
        refused. Rounds go on until one applies; `changing` says what kept changing when
        none does."""
        for _ in range(STALE_RETRIES):
            outcome = await attempt()
            if outcome is not STALE:
                return outcome
        raise StoreError(f"{changing} kept changing; try again")

    async def _script(self, name: str, *args: Any) -> Any:
        assert self._scripts is not None, "store is not open"
        return await self._call(self._scripts.call, name, [arg(a) for a in args])

    async def _now(self, given: float | None) -> float:
        """The injected time, else the server's clock (for values written from Python)."""
        judged = self.clock.judged(given)
        if judged is not None:
            return judged
        seconds, micros = await self._call(self.redis.time)
        server_s = float(seconds + micros / 1_000_000)
        if isinstance(self.clock, StoreClock):
            self.clock.observe(server_s, time.time())
        return server_s

    def _now_arg(self, given: float | None) -> str:
        """A script's `now`: the judged time, or '' for "the server's clock" (TIME there)."""
        judged = self.clock.judged(given)
        return "" if judged is None else repr(float(judged))

    async def _hashes(self, run_ids: Sequence[int | str]) -> list[dict[str, str]]:
        if not run_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hgetall(self.key(f"run:{run_id}"))
        return list(await self._call(pipe.execute))


# -- helpers --------------------------------------------------------------------------


def due_key(priority: str, queue: str, task: str) -> str:
    """The due set of (priority, queue, task), after the prefix: as lib.lua's due_key."""
    return f"due:{priority}:{len(queue.encode())}:{queue}:{task}"


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)
