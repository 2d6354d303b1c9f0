"""The Redis store's run lifecycle: claims, lease extensions and finishes, cancel and
retry, rescue and deadlines."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Sequence

from ...errors import RunNotFound, StoreError
from ...runs import Run, RunState
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import (
    RunCancelParams,
    RunClaimParams,
    RunExpireParams,
    RunExtendParams,
    RunExtendResult,
    RunFinishParams,
    RunPauseParams,
    RunRescueParams,
    RunResumeParams,
    RunRetryParams,
    ThreadGetParams,
)
from ._base import STALE, RedisBase, Stale
from ._codec import arg, identity, run_from_claim, run_from_hash

__all__ = ["RedisLifecycle"]


class RedisLifecycle(RedisBase):
    """Moving runs on after their submission (`RunStore`)."""

    # -- the hot path ---------------------------------------------------------------

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        runs = _claimed(params, await self._script("claim", *self._claim_args(params)))
        return await self._claim_limited(params, runs)

    async def _claim_limited(self, params: RunClaimParams, runs: list[Run]) -> list[Run]:
        """`runs` and, for a claim that names limited tasks and wants more, the runs of
        those tasks the limited claim takes (claim.lua's `claim_limited`): due sets are
        per task, so a limited task's runs are never walked by the claim without limits."""
        if not params.limited or len(runs) >= params.limit:
            return runs
        limited = dataclasses.replace(params, limit=params.limit - len(runs), tasks=list(params.limited),
                                      limited=())
        script = "claim_fair" if params.fair else "claim_limited"
        return runs + _claimed(limited, await self._script(script, *self._claim_args(limited)))

    def _claim_args(self, params: RunClaimParams) -> list[Any]:
        keys = ["*"] if params.majors is None else rules.claim_keys(params.majors)
        tasks = params.tasks
        if params.limited:  # theirs is the limited claim (claim_limited's tasks are these)
            tasks = [task for task in tasks if task not in params.limited]
        return [self._now_arg(params.now), params.limit, params.worker_id, float(params.lease_s),
                params.fleet or "", len(params.queues), *params.queues, len(tasks), *tasks,
                *keys]

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        if not params.runs:
            return RunExtendResult()
        pairs = [value for run_id, fence in params.runs for value in (run_id, fence)]
        flat = await self._script("extend", self._now_arg(params.now), float(params.lease_s),
                                  params.worker_id, *pairs)
        kept = {int(run_id): int(flag) for run_id, flag in zip(flat[::2], flat[1::2])}
        return RunExtendResult(lost=[run_id for run_id, _ in params.runs if run_id not in kept],
                               cancel_requested=[run_id for run_id, flag in kept.items() if flag])

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        refused = [int(i) for i in await self._script("finish", *self._finish_args(params))]
        self.hub.fire_finished(params)
        return refused

    def _finish_args(self, params: Sequence[RunFinishParams]) -> list[Any]:
        args: list[Any] = [self._now_arg(params[0].now), len(rules.REQUEUE_STOPS)]
        for stop in rules.REQUEUE_STOPS:
            args += [stop.flag, stop.ends_as.value, stop.error]
        args.append(json.dumps([
            [str(p.run_id), str(p.fence), p.state, p.result, p.error,
             None if p.run_at is None else repr(float(p.run_at)), p.release, p.kind, p.event_data,
             p.waiting]
            for p in params]))
        return args

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        # The two scripts in one round trip; the claim runs after the finishes, so it sees
        # the queue as they leave it.
        if not params:
            return [], await self.run_claim(claim)
        assert self._scripts is not None, "store is not open"
        calls = [("finish", [arg(a) for a in self._finish_args(params)]),
                 ("claim", [arg(a) for a in self._claim_args(claim)])]
        refused, rows = await self._call(self._scripts.call_many, self.redis, calls)
        self.hub.fire_finished(params)
        return [int(i) for i in refused], await self._claim_limited(claim, _claimed(claim, rows))

    # -- cancel, retry --------------------------------------------------------------------

    async def _locked_run(self, run_id: int) -> Run:
        run = await self.run_get(run_id)
        if run is None:
            raise RunNotFound(f"run {run_id} not found")
        return run

    async def run_cancel(self, params: RunCancelParams) -> Run:
        # The script reads the family and applies rules.plan_cancel to it in one step.
        reply = await self._script("cancel", self._now_arg(params.now), params.run_id,
                                   rules.cancelled_error(params.reason),
                                   json.dumps({"reason": params.reason}))
        if reply[0] == "missing":
            raise RunNotFound(f"run {params.run_id} not found")
        run = run_from_hash(reply[1])
        if reply[0] == "refused":
            rules.plan_cancel(run, [])  # raises its error
            raise StoreError(f"run {run.id}: cancel refused in state {run.state.value}")
        self.hub.fire_all()  # cancel, done and events topics of a whole family
        return run

    async def run_retry(self, params: RunRetryParams) -> Run:
        async def attempt() -> Run | Stale:
            fields = await self._call(self.redis.hgetall, self.key(f"run:{params.run_id}"))
            if not fields:
                raise RunNotFound(f"run {params.run_id} not found")
            run = run_from_hash(fields)
            forget = rules.retry_drops(run, await self.step_list(run.id))
            ident = "" if run.thread is None else identity(run.tenant, run.thread)
            if run.thread is not None:
                # The run is its thread's when it keeps the number the name has now.
                found = await self.thread_get(ThreadGetParams(run.thread, run.tenant))
                rules.check_retry_on_thread(run, found, found is not None and
                                            fields.get("thread_no") == str(found.incarnation))
            reply = await self._script("retry", self._now_arg(params.now), run.id, run.state.value,
                                       json.dumps(rules.retried_event(run, params.by)), ident,
                                       run.fence, ",".join(rules.RETRYABLE), *forget)
            if reply[0] != "ok":
                return STALE
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(run.id))
            return run_from_hash(reply[1])

        return await self._decided(attempt, f"run {params.run_id}: its state during the retry")

    # -- pause, resume ----------------------------------------------------------------

    async def run_pause(self, params: RunPauseParams) -> Run:
        return await self._pausing(params.run_id, params.now, rules.plan_pause,
                                   lambda run: {"by": params.by, "waited": run.waiting}, "pause")

    async def run_resume(self, params: RunResumeParams) -> Run:
        return await self._pausing(params.run_id, params.now, rules.plan_resume,
                                   lambda run: {"by": params.by}, "resume")

    async def _pausing(self, run_id: int, now: float | None, plan: Callable[[Run], str],
                       data: Callable[[Run], dict[str, Any]], what: str) -> Run:
        """Read the run, decide (the rulebook), apply in `pause.lua`, which re-checks."""
        async def attempt() -> Run | Stale:
            fields = await self._call(self.redis.hgetall, self.key(f"run:{run_id}"))
            if not fields:
                raise RunNotFound(f"run {run_id} not found")
            run = run_from_hash(fields)
            action = plan(run)
            if action == rules.PauseAction.NOTHING:
                return run
            reply = await self._script("pause", self._now_arg(now), run.id, action, json.dumps(data(run)))
            if reply[0] != "ok":
                return STALE
            self.hub.fire_all()
            return run_from_hash(reply[1])

        return await self._decided(attempt, f"run {run_id}: its state during the {what}")

    # -- rescue and deadlines -----------------------------------------------------------

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]:
        now_text, gone, lapsed, *stuck_flat = await self._script(
            "rescue_scan", self._now_arg(params.now), float(params.worker_stale_s))
        now = float(now_text)
        # A lapsed key is a death only once it has stayed lapsed a moment (_liveness.py):
        # after a Redis outage, the living workers' keys come back within that moment.
        # A registration that is gone is a death at once.
        dead = sorted({*gone, *self._unmarked.dead(lapsed, now)})
        if not dead and not stuck_flat:
            return []  # most ticks of most workers find nothing
        stuck = [run_from_hash(flat) for flat in stuck_flat if flat]
        fates = [rules.rescue_fate(run, params.max_recoveries, now)
                 for run in stuck if run.state is RunState.RUNNING and (
                     run.owner in dead or (run.lease_expires_at or 0.0) < now)]
        if not dead and not fates:
            return []
        args: list[Any] = [now_text, float(params.worker_stale_s), len(dead), *dead]
        for fate in fates:
            args += [fate.run_id, fate.fence, fate.state.value, fate.recoveries, fate.run_at,
                     fate.finished_at, fate.error, fate.event_kind]
        rescued = [run_from_hash(flat) for flat in await self._script("rescue", *args)]
        self.hub.fire_changed(rescued)
        return rescued

    async def run_expire_many(self, params: RunExpireParams) -> list[Run]:
        rows = await self._script("expire", self._now_arg(params.now), rules.deadline_error(),
                                  json.dumps({"error": "DeadlineExceeded"}))
        expired = [run_from_hash(flat) for flat in rows]
        self.hub.fire_changed(expired)
        return expired


# -- helpers --------------------------------------------------------------------------


def _claimed(params: RunClaimParams, rows: list[Any]) -> list[Run]:
    """The runs of the claim script's answer, in claim order."""
    if not rows:
        return []
    started_at, lease = (float(value) for value in rows[0])
    return [run_from_claim(values, params.worker_id, started_at, lease) for values in rows[1:]]
