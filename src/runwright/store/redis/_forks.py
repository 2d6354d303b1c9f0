"""The Redis store's forks (`RunStore.run_fork`): decided in Python on a read of the
original and its journal, applied by one script that re-checks what the decision saw."""

from __future__ import annotations

import json

from ...runs import Run
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import RunForkParams
from ._base import STALE, RedisBase, Stale
from ._codec import run_from_hash
from ._runs import _existed, _insert_fields

__all__ = ["RedisForks"]


class RedisForks(RedisBase):
    """`run_fork`, one script a decision."""

    async def run_fork(self, params: RunForkParams) -> Run:
        async def attempt() -> Run | Stale:
            original = rules.check_fork(await self.run_get(params.run_id), params)
            journal = [(record.position, record.name) for record in await self.step_list(original.id)]
            end = rules.fork_end(original.id, journal, params.from_step)
            below = sum(1 for position, _ in journal if position < end)
            named = params.from_step if isinstance(params.from_step, str) else ""
            reply = await self._script(
                "fork", self._now_arg(params.insert.now), original.id, end, below, named,
                json.dumps(rules.forked_event(original.id, end, below)), *_insert_fields(params.insert))
            if reply[0] == "stale":
                return STALE
            run = _existed(run_from_hash(reply[1]), bool(reply[0]))
            if not run.existed:
                self.hub.fire(QUEUED)
                self.hub.fire(events_topic(run.id))
            return run

        return await self._decided(attempt, f"run {params.run_id}: its journal during the fork")
