"""The FastAPI application: routes over an App, auth, problem+json errors, SSE.

Each request acts through the caller's scope: the tenant's view of the App when auth is
on (so another tenant's run is a 404, keys and threads are the tenant's own), the App
itself when auth is off (local use: every run is visible)."""

from __future__ import annotations

import json
import logging
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Awaitable, Callable

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi import Path as FastAPIPath
from fastapi.responses import HTMLResponse, StreamingResponse

from .. import metrics
from ..app import App
from ..logs import event
from ..runs import RunState
from ..scope import RunScope
from .auth import Auth
from .body_limit import BodyLimit
from .fanout import Broadcaster
from .fleet_routes import add_fleet_routes
from .models import EventOut, EventPage, RunOut, RunPage, SubmitIn
from .problems import OperatorOnly, install_problem_handlers, problem

__all__ = ["create_server"]

DASHBOARD = Path(__file__).with_name("static") / "dashboard.html"
MAX_BODY_BYTES = 2 << 20  # a submission's JSON; the App's own payload limit applies inside


def _tenant(request: Request) -> str | None:
    """The caller's tenant, set by the authentication middleware."""
    tenant: str | None = request.state.tenant
    return tenant


def _operator(request: Request) -> None:
    """Admit the operator only (an operator token, or auth off: both are tenant None)."""
    if request.state.tenant is not None:
        raise OperatorOnly(f"{request.method} {request.url.path} is the operator's: it concerns "
                           f"the whole deployment (send a token of RUNWRIGHT_OPERATOR_TOKENS)")


# At module level: FastAPI resolves (string) annotations in the module's namespace.
Tenant = Annotated[str | None, Depends(_tenant)]
# What is the deployment's (every tenant's counts, its schedules): a tenant's token gets 403.
OPERATOR_ONLY: dict[str, Any] = {
    "dependencies": [Depends(_operator)],
    "responses": {403: {"description": "A tenant's token: this is the operator's"}}}
# Ids are 64-bit in every store: a larger number is a 422, not a database overflow.
MAX_ID = 2**63 - 1
RunId = Annotated[int, FastAPIPath(ge=1, le=MAX_ID)]
Before = Annotated[int | None, Query(ge=1, le=MAX_ID)]
After = Annotated[int, Query(ge=0, le=2**31 - 1)]


def create_server(app: App, auth: Auth) -> FastAPI:
    """An ASGI application serving `app`'s runs. Auth is mandatory unless explicitly off."""

    @asynccontextmanager
    async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
        if not auth.enabled:
            event(logging.WARNING, "AUTH IS OFF: every caller sees every run (RUNWRIGHT_AUTH=off)")
        await app.open()
        member = await app.fleet.member_for("server")  # this server's life in the fleet
        await member.join()
        await member.resync()
        await member.ready()
        yield
        await member.recycling(0.0)
        await member.leave()
        await app.close()

    api = FastAPI(title="runwright", version="0.1.0", lifespan=lifespan,
                  description="Durable runs: submit, follow, cancel, retry.")
    install_problem_handlers(api)
    # Added before the authentication middleware, so inside it: an unauthenticated caller
    # is answered 401 without a byte of its body read.
    api.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    broadcaster = Broadcaster(app)
    add_fleet_routes(api, app, OPERATOR_ONLY)

    @api.middleware("http")
    async def authenticate(request: Request,
                           call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.url.path in ("/", "/healthz", "/readyz", "/openapi.json", "/docs"):
            return await call_next(request)
        tenant = auth.tenant_of(request.headers.get("authorization"))
        if tenant is False:
            response = problem(401, "Unauthorized", "send Authorization: Bearer <token>")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        request.state.tenant = tenant
        return await call_next(request)

    def scope_of(who: str | None) -> RunScope:
        """The caller's view: another tenant's run answers 404, never 403 (ids are not probed)."""
        return app if who is None or not auth.enabled else app.tenant(who)

    @api.get("/", include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        """The dashboard: one static page; its data comes from this API, with the caller's token."""
        return HTMLResponse(DASHBOARD.read_text())

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is alive."""
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz() -> Response:
        """The store answers."""
        try:
            await app.check_ready()
        except Exception as exc:  # any failure means "not ready", and says why
            return problem(503, "Store unavailable", str(exc))
        return Response(json.dumps({"status": "ready"}), media_type="application/json")

    @api.get("/metrics", response_class=Response, **OPERATOR_ONLY)
    async def prometheus() -> Response:
        """Prometheus text format: this process's counters and the store's gauges, over every
        tenant's runs (the operator's: scrape with an operator bearer token)."""
        return Response(await metrics.scrape(app), media_type="text/plain; version=0.0.4")

    @api.get("/summary")
    async def status_summary(who: Tenant) -> dict[str, Any]:
        """Pending, running, done, dead, workers alive, oldest due age (the dashboard's data),
        of the caller's own runs."""
        return await metrics.summary(scope_of(who))

    @api.post("/runs", status_code=201, response_model=RunOut,
              responses={200: {"model": RunOut, "description": "The key already named a run"}})
    async def submit(body: SubmitIn, response: Response, who: Tenant) -> RunOut:
        handle = await scope_of(who).submit(body.task, key=body.key, priority=body.priority,
                                            delay_s=body.delay_s, queue=body.queue, thread=body.thread,
                                            on_busy=body.on_busy, **body.args)
        if handle.existed:
            response.status_code = 200
        return RunOut.of(handle.run)

    @api.get("/runs/{run_id}", response_model=RunOut)
    async def get_run(run_id: RunId, who: Tenant) -> RunOut:
        return RunOut.of(await scope_of(who).read_run(run_id))

    @api.get("/runs", response_model=RunPage)
    async def list_runs(who: Tenant, state: list[RunState] = Query(default=[]), task: str | None = None,
                        queue: str | None = None, thread: str | None = None,
                        before: Before = None, limit: int = Query(50, ge=1, le=500),
                        created_after: float | None = Query(None, ge=0, le=1e11),
                        created_before: float | None = Query(None, ge=0, le=1e11)) -> RunPage:
        """Newest first; `before` is the cursor; `created_after`/`created_before` (epoch
        seconds) bound the submission time."""
        runs = await scope_of(who).list_runs(
            states=state, task=task, queue=queue, thread=thread, limit=limit, before_id=before,
            created_after=created_after, created_before=created_before)
        return RunPage(items=[RunOut.of(r) for r in runs],
                       next_cursor=runs[-1].id if len(runs) == limit else None)

    @api.get("/dead", response_model=RunPage)
    async def dead_letters(who: Tenant, before: Before = None,
                           limit: int = Query(50, ge=1, le=500)) -> RunPage:
        return await list_runs(who, [RunState.DEAD], None, None, None, before, limit, None, None)

    @api.post("/runs/{run_id}/cancel", response_model=RunOut)
    async def cancel(run_id: RunId, who: Tenant) -> RunOut:
        return RunOut.of(await scope_of(who).cancel(run_id))

    @api.post("/runs/{run_id}/retry", response_model=RunOut)
    async def retry(run_id: RunId, who: Tenant) -> RunOut:
        return RunOut.of((await scope_of(who).retry(run_id)).run)

    @api.get("/runs/{run_id}/events", response_model=EventPage)
    async def events(run_id: RunId, who: Tenant, after: After = 0) -> EventPage:
        page = await scope_of(who).events_page(run_id, after)
        return EventPage(items=[EventOut.of(e) for e in page], next_after=page[-1].seq if page else after)

    @api.get("/runs/{run_id}/events/stream", response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}})
    async def stream(run_id: RunId, who: Tenant, after: After = 0,
                     last_event_id: str | None = Header(None)) -> StreamingResponse:
        """Server-sent events: replays after `after` (or the Last-Event-ID a reconnecting
        client sends), then follows live until the run's terminal event."""
        await scope_of(who).read_run(run_id)  # a 404 now, not a broken stream later
        start = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
        return StreamingResponse(_sse(broadcaster, run_id, start), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @api.post("/threads", status_code=201)
    async def create_thread(who: Tenant) -> dict[str, str]:
        """A new thread id; the thread comes to exist with its first run."""
        return {"thread": uuid.uuid4().hex}

    @api.get("/threads/{thread}/messages")
    async def thread_messages(thread: str, who: Tenant) -> dict[str, Any]:
        """A thread's history (410 once deleted)."""
        return {"thread": thread, "messages": await scope_of(who).thread_history(thread)}

    @api.get("/threads/{thread}/runs", response_model=RunPage)
    async def thread_runs(thread: str, who: Tenant, before: Before = None,
                          limit: int = Query(50, ge=1, le=500)) -> RunPage:
        return await list_runs(who, [], None, None, thread, before, limit, None, None)

    @api.delete("/threads/{thread}", status_code=204)
    async def delete_thread(thread: str, who: Tenant) -> Response:
        """Cancel the thread's open runs, wait for them, then delete it."""
        await scope_of(who).delete_thread(thread)
        return Response(status_code=204)

    @api.get("/schedules", **OPERATOR_ONLY)
    async def schedules() -> list[dict[str, Any]]:
        """Schedules with their next fire times (their arguments are not shown). Schedules
        are the deployment's, declared in its code: listing, pausing and resuming them is
        the operator's."""
        return [{"name": s.name, "cron": s.cron, "tz": s.tz, "task": s.task, "paused": s.paused,
                 "misfire": s.misfire, "next_fire_at": s.next_fire_at}
                for s in await app.list_schedules()]

    @api.post("/schedules/{name}/pause", status_code=204, **OPERATOR_ONLY)
    async def pause(name: str) -> Response:
        await app.pause_schedule(name)
        return Response(status_code=204)

    @api.post("/schedules/{name}/resume", status_code=204, **OPERATOR_ONLY)
    async def resume(name: str) -> Response:
        await app.resume_schedule(name)
        return Response(status_code=204)

    @api.get("/workers")
    async def workers(who: Tenant) -> list[dict[str, Any]]:
        return [{"id": w.id, "host": w.host, "pid": w.pid, "queues": w.queues,
                 "started_at": w.started_at, "heartbeat_at": w.heartbeat_at}
                for w in await scope_of(who).list_workers()]

    return api


async def _sse(broadcaster: Broadcaster, run_id: int, after: int) -> AsyncIterator[bytes]:
    async for item in broadcaster.follow(run_id, after):
        data = json.dumps({"seq": item.seq, "kind": item.kind, "data": item.data, "at": item.at})
        yield f"id: {item.seq}\nevent: {item.kind}\ndata: {data}\n\n".encode()

