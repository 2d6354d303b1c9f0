"""The runs API: submit a run, read it, list runs (and the dead letters), cancel and
retry one, read its log page by page or follow it over server-sent events."""

from __future__ import annotations

import json
from typing import AsyncIterator

from fastapi import FastAPI, Header, Query, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..app import App
from ..client._why import SCAN_LIMIT
from ..core import _inputs as inputs
from ..runs import RunState, WaitReason
from ..tasks._submission import refuse_options_in
from ._decode import seal_run
from ._deps import (
    After,
    Before,
    ErrorFilter,
    KeyFilter,
    LastEventId,
    NameFilter,
    QueueFilter,
    RunId,
    Scopes,
    Tenant,
    TenantFilter,
    ThreadFilter,
)
from ._fanout import Broadcaster
from ._models import EventOut, EventPage, ForkIn, RunOut, RunPage, SubmitIn
from ._sse import SSE_SEP, event_stream, opening

__all__ = ["add_run_routes"]


def add_run_routes(api: FastAPI, app: App, scopes: Scopes, ping_s: float) -> None:
    """`ping_s`: the keep-alive interval of a run's event stream."""
    # One per server: it shares one live reader of a run among all of its followers.
    broadcaster = Broadcaster(app)

    @api.post("/runs", status_code=201, response_model=RunOut,
              responses={200: {"model": RunOut, "description": "The key already named a run, or flow "
                                                                "control answered with an existing one "
                                                                "(outcome debounced, batched or dropped)"}})
    async def submit(body: SubmitIn, response: Response, who: Tenant,
                     traceparent: str | None = Header(
                         None, description="W3C traceparent: the run's spans continue this trace.")
                     ) -> RunOut:
        """Submit a run: `task` names a registered task or a built-in job type (webhook,
        llm, chain: their `args` are published below); the other fields are the
        submission's options, and the `traceparent` header is one too. An unknown field is
        refused, named."""
        arguments = body.arguments()
        refuse_options_in(arguments)
        handle = await scopes.of(who).submit(body.task, **body.submission(), traceparent=traceparent,
                                             **arguments)
        if handle.existed or handle.outcome in ("debounced", "batched", "dropped"):  # no new run
            response.status_code = 200
        return RunOut.of(handle.run)

    @api.get("/runs/{run_id}", response_model=RunOut)
    async def get_run(run_id: RunId, who: Tenant) -> RunOut:
        scope = scopes.of(who)
        run = await scope.read_run(run_id)
        return RunOut.of(run, (await scope.waiting([run])).get(run.id))

    @api.get("/runs", response_model=RunPage,
             responses={403: {"description": "A tenant's token named another tenant"}})
    async def list_runs(who: Tenant, state: list[RunState] = Query(default=[]), task: NameFilter = None,
                        queue: QueueFilter = None, thread: ThreadFilter = None,
                        before: Before = None, limit: int = Query(50, ge=1, le=500),
                        created_after: float | None = Query(None, ge=0, le=1e11),
                        created_before: float | None = Query(None, ge=0, le=1e11),
                        key: KeyFilter = None, tenant: TenantFilter = None,
                        error: ErrorFilter = None, forked_from: Before = None,
                        waiting: WaitReason | None = Query(None, description=(
                            "Queued runs that wait on this (each run's `waiting` says why it "
                            "waits); worker, version, thread and slot are judged on the newest "
                            f"{SCAN_LIMIT} due runs."))) -> RunPage:
        """Newest first; `before` is the cursor; `created_after`/`created_before` (epoch
        seconds) bound the submission time; `key` finds the run of an idempotency key;
        `tenant` (the operator's) lists one tenant's runs; `error` finds runs by the text
        of their error; `forked_from`, the forks of a run; `waiting`, the queued runs that
        wait on one thing."""
        scope = scopes.narrowed(who, tenant)
        runs = await scope.list_runs(
            states=state, task=task, queue=queue, thread=thread, limit=limit, before_id=before,
            created_after=created_after, created_before=created_before, key=key, waiting=waiting,
            error=error, forked_from=forked_from)
        return RunPage.page(runs, limit, await scope.waiting(runs))

    @api.get("/dead", response_model=RunPage)
    async def dead_letters(who: Tenant, before: Before = None,
                           limit: int = Query(50, ge=1, le=500)) -> RunPage:
        # Every argument given: called directly, a parameter's default is FastAPI's Query
        # marker, not its value.
        return await list_runs(who, state=[RunState.DEAD], task=None, queue=None, thread=None,
                               before=before, limit=limit, created_after=None, created_before=None,
                               key=None, tenant=None, error=None, forked_from=None, waiting=None)

    @api.post("/runs/{run_id}/cancel", response_model=RunOut)
    async def cancel(run_id: RunId, who: Tenant) -> RunOut:
        return RunOut.of(await scopes.of(who).cancel(run_id))

    @api.post("/runs/{run_id}/pause", response_model=RunOut)
    async def pause(run_id: RunId, who: Tenant) -> RunOut:
        """Pause a run: queued, it is held now (never claimed nor woken until resumed);
        running, it stops at its next step boundary (`pause_requested` until then) and is
        held, its journal kept. Pausing a paused run changes nothing; 409 once it ended."""
        return RunOut.of(await scopes.of(who).pause(run_id))

    @api.post("/runs/{run_id}/resume", response_model=RunOut)
    async def resume(run_id: RunId, who: Tenant) -> RunOut:
        """Resume a paused run: due again with fresh attempts, it replays its journal and goes
        on from where it stopped, on the code deployed now (409 if it is not paused)."""
        return RunOut.of(await scopes.of(who).resume(run_id))

    @api.post("/runs/{run_id}/retry", response_model=RunOut)
    async def retry(run_id: RunId, who: Tenant) -> RunOut:
        """Re-queue a dead or failed run with fresh attempts (409 in another state; 410 for
        a run of a deleted thread, even once its name was given to a new thread)."""
        return RunOut.of((await scopes.of(who).retry(run_id)).run)

    @api.post("/runs/{run_id}/fork", status_code=201, response_model=RunOut,
              responses={200: {"model": RunOut, "description": "The key already named this fork"}})
    async def fork(run_id: RunId, body: ForkIn, response: Response, who: Tenant) -> RunOut:
        """Fork the run from a step: a new run (`forked_from` names this one) whose journal
        holds this run's entries before `from_step`, replayed, and which runs the rest on
        the code deployed now, with `args` merged over the arguments (422 for a step past
        the journal's end or a name it never journaled, or a run of a thread; 409 for a
        key that names another run)."""
        handle = await scopes.of(who).fork(run_id, body.from_step, args=body.args, key=body.key)
        if handle.existed:
            response.status_code = 200
        return RunOut.of(handle.run)

    @api.get("/runs/{run_id}/events", response_model=EventPage)
    async def events(run_id: RunId, who: Tenant, after: After = 0) -> EventPage:
        await seal_run(scopes.of(who), run_id)
        page = await scopes.of(who).events_page(run_id, after)
        return EventPage(items=[EventOut.of(e) for e in page], next_after=page[-1].seq if page else after)

    @api.get("/runs/{run_id}/events/stream", response_class=EventSourceResponse,
             responses={200: {"content": {"text/event-stream": {}}},
                        204: {"description": "The run has ended and nothing is left after the "
                                             "given event: a client stops reconnecting"}})
    async def stream(run_id: RunId, who: Tenant, after: After = 0,
                     last_event_id: LastEventId = None) -> Response:
        """Server-sent events: replays after `after` (or the Last-Event-ID a reconnecting
        client sends), then follows live until the run has ended and every event of it
        was sent. Each event: `id` its seq, `event` its kind, `data` its JSON."""
        # A Last-Event-ID that is no seq is a 422 now, not a stream that dies once open.
        start = inputs.sequence_text(last_event_id, "Last-Event-ID") if last_event_id else after
        run = await scopes.of(who).read_run(run_id)  # a 404 now, not a broken stream later
        if run.done and run.last_seq <= start:
            return Response(status_code=204)
        if await seal_run(scopes.of(who), run_id):
            # Sealed to this reader: its own follower, which opens (seals) in this request's
            # context; the shared reader opens every envelope for those who read plain.
            return event_stream(_run_events(app, run_id, start), ping_s)
        return event_stream(_run_events(broadcaster, run_id, start), ping_s)


async def _run_events(source: Broadcaster | App, run_id: int, after: int) -> AsyncIterator[ServerSentEvent]:
    yield opening(f"run {run_id} after {after}")
    items = (source.follow(run_id, after) if isinstance(source, Broadcaster)
             else source.events(run_id, after=after))
    async for item in items:
        data = json.dumps({"seq": item.seq, "kind": item.kind, "data": item.data, "at": item.at})
        yield ServerSentEvent(data, id=str(item.seq), event=item.kind, sep=SSE_SEP)
