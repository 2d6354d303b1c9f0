"""The dashboard: its page and assets, and what it reads beside the runs API: chart
series, a run's attempts, journal and children, and the bulk retry of dead letters. Each
data route acts through the caller's scope, as every route does (a tenant sees its own
runs only); the page and its assets hold no data, so any caller may load them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from ..client._scope import RunScope
from ..core._payloads import load
from ..errors import InvalidInput
from ._decode import seal_run
from ._deps import MAX_ID, RunId, Tenant
from ._models import RunOut, RunPage
from ._series import SERIES_SAMPLE, DepthHistory, buckets

__all__ = ["PAGE_PATH", "STATIC_URL", "add_dashboard_routes"]

MAX_BUCKETS = 1440
STATIC = Path(__file__).with_name("static")
DASHBOARD = STATIC / "dashboard.html"
PAGE_PATH = "/"
STATIC_URL = "/static"  # the dashboard's scripts, styles and vendored chart library


class AttemptOut(BaseModel):
    """One claim of the run (a row per `started` event)."""

    attempt: int = Field(description="The attempt this claim served, as the run's `attempt` counts "
                                     "them: a takeover or a park continues an attempt in a new claim.")
    fence: int = Field(description="The claim's token: one per claim.")
    worker: int | None
    started_at: float
    ended_at: float | None
    outcome: str | None = Field(description="How it ended; null while it runs.")
    error: Any = None


class StepOut(BaseModel):
    position: int
    name: str
    status: str = Field(description="done, failed, or started (an at-most-once call in flight)")
    result: Any = None
    error: dict[str, Any] | None = None
    fence: int = Field(description="The claim that recorded it (see the run's attempts).")
    recorded_at: float
    child_id: int | None = Field(None, description="The child run a `submit:` entry started.")


class RetryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[int] = Field(min_length=1, max_length=500, description="Dead or failed runs' ids.")


class Refused(BaseModel):
    id: int
    reason: str


class RetriedOut(BaseModel):
    retried: list[RunOut]
    refused: list[Refused]


def add_dashboard_routes(api: FastAPI, scope_of: Callable[[str | None], RunScope],
                         depths: DepthHistory) -> None:
    @api.get("/metrics/series")
    async def series(who: Tenant, window_s: float = Query(3600, ge=60, le=86400),
                     step_s: float = Query(60, ge=5, le=3600)) -> dict[str, Any]:
        """The dashboard's charts, of the caller's runs: per bucket of `step_s` over the
        last `window_s`, runs ended, throughput per minute and p50/p95/p99 of
        submit-to-start and run duration of the runs that ended in it (null where the
        bounded sample cannot tell); queue depth as this server sampled it (it keeps an
        hour, from its start), and now."""
        if window_s / step_s > MAX_BUCKETS:
            raise InvalidInput(f"window_s / step_s is at most {MAX_BUCKETS} buckets, got "
                               f"{window_s:g} / {step_s:g}")
        scope = scope_of(who)
        now, by_queue = await depths.sample(scope, who)
        sample = await scope.ended_times(now - window_s, SERIES_SAMPLE)
        history = depths.history(who, now - window_s)
        return {"now": now, "window_s": window_s, "step_s": step_s,
                **buckets(sample, now, window_s, step_s),
                "queue_depth": {"t": [t for t, _ in history], "depth": [d for _, d in history],
                                "sampled_every_s": depths.sample_s,
                                "now": sum(by_queue.values()), "by_queue": by_queue}}

    @api.get("/runs/{run_id}/attempts", response_model=list[AttemptOut])
    async def attempts(run_id: RunId, who: Tenant) -> list[AttemptOut]:
        """The run's attempts: when each started and ended, on which worker, how it ended."""
        return [AttemptOut(attempt=a.attempt, fence=a.fence, worker=a.worker, started_at=a.started_at,
                           ended_at=a.ended_at, outcome=a.outcome, error=a.error)
                for a in await scope_of(who).attempts(run_id)]

    @api.get("/runs/{run_id}/steps", response_model=list[StepOut])
    async def steps(run_id: RunId, who: Tenant) -> list[StepOut]:
        """The run's journal in order: its steps, sleeps, child submissions, questions and
        snapshots, each with the time it was recorded."""
        await seal_run(scope_of(who), run_id)
        return [_step_out(s.position, s.name, s.status, s.result, s.error, s.fence, s.created_at)
                for s in await scope_of(who).steps(run_id)]

    @api.get("/runs/{run_id}/children", response_model=RunPage)
    async def children(run_id: RunId, who: Tenant) -> RunPage:
        """The child runs this run started (`ctx.submit`), in the order it started them."""
        scope = scope_of(who)
        ids = [out.child_id for out in await steps(run_id, who) if out.child_id is not None]
        found = {run.id: run for run in await scope.read_runs(ids)} if ids else {}
        why = await scope.waiting(list(found.values()))
        return RunPage(items=[RunOut.of(found[i], why.get(i)) for i in ids if i in found], next_cursor=None)

    @api.post("/dead/retry", response_model=RetriedOut)
    async def retry_dead(body: RetryIn, who: Tenant) -> RetriedOut:
        """Re-queue several dead (or failed) runs; each one that cannot be is named with
        why (not found among the caller's runs, or not in a state to retry)."""
        ids = [i for i in body.ids if 1 <= i <= MAX_ID]
        done, refused = await scope_of(who).retry_many(ids)
        out_of_range = [Refused(id=i, reason=f"run {i} not found") for i in body.ids if i not in ids]
        return RetriedOut(retried=[RunOut.of(h.run) for h in done],
                          refused=[Refused(id=i, reason=r) for i, r in refused.items()] + out_of_range)

    @api.get(PAGE_PATH, include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        """The dashboard: one static page; its data comes from this API, with the caller's token."""
        return HTMLResponse(DASHBOARD.read_text())

    api.mount(STATIC_URL, StaticFiles(directory=STATIC), name="dashboard-static")


def _step_out(position: int, name: str, status: str, result: str | None, error: str | None,
              fence: int, at: float) -> StepOut:
    value = None if result is None else load(result)
    child = value if name.startswith("submit:") and status == "done" and isinstance(value, int) else None
    return StepOut(position=position, name=name, status=status, result=value,
                   error=None if error is None else json.loads(error), fence=fence, recorded_at=at,
                   child_id=child)
