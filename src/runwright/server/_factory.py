"""The FastAPI application, assembled: its life (the App opened, the server in the
fleet), the body limit and authentication middleware, problem+json errors, the docs,
and the routes, which live in the `*_routes` modules by what they serve.

Each request acts through the caller's scope (`deps.Scopes`): the tenant's view of the
App when auth is on, the App itself when auth is off (local use: every run is visible)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request, Response

from ..app import App
from ..core._payloads import holds_keys
from ..observe._logs import event
from ._auth import Auth
from ._body_limit import BodyLimit
from ._dashboard_routes import PAGE_PATH, STATIC_URL, add_dashboard_routes
from ._decode import DECODE_PARAM, OperatorView, audit, decode_asked, enter_view, leave_view
from ._deps import OPERATOR_ONLY, Scopes
from ._docs import ASSETS_URL, PUBLIC_PATHS, install_docs
from ._event_routes import add_event_routes
from ._fleet_routes import add_fleet_routes
from ._problems import INVALID, install_problem_handlers, problem
from ._question_routes import add_question_routes
from ._run_routes import add_run_routes
from ._schedule_routes import add_schedule_routes
from ._series import DepthHistory
from ._session import SESSION_PATH, add_session_routes, credentials
from ._signal_routes import add_signal_routes
from ._sse import PING_S
from ._status_routes import add_status_routes
from ._thread_routes import add_thread_routes
from ._worker_routes import add_worker_routes

__all__ = ["create_server"]

DEPTH_SAMPLE_S = 10.0  # how often the server samples queue depth for the dashboard's chart
MAX_BODY_BYTES = 2 << 20  # a submission's JSON; the App's own payload limit applies inside
DRAIN_S = 10.0  # a stopping server lets requests in flight finish this long (announced)

# Paths any caller may read: the dashboard's page and assets (its data needs a token),
# the probes, and the API's documentation. Signing in and out needs no token either.
PUBLIC = frozenset({PAGE_PATH, "/healthz", "/readyz", "/openapi.json", *PUBLIC_PATHS})
PUBLIC_PREFIXES = (ASSETS_URL + "/", STATIC_URL + "/")

CallNext = Callable[[Request], Awaitable[Response]]


def create_server(app: App, auth: Auth, *, ping_s: float = PING_S,
                  depth_sample_s: float = DEPTH_SAMPLE_S) -> FastAPI:
    """An ASGI application serving `app`'s runs. Auth is mandatory unless explicitly off.
    `ping_s`: the SSE keep-alive interval. Defaults to 15 s. `depth_sample_s`: how often
    queue depth is sampled for the dashboard. Defaults to 10 s."""
    # A task whose type hints cannot be checked stops the server's start, in one line, and
    # never answers its submissions with a 500.
    app.registry.prepare_arguments()
    depths = DepthHistory(depth_sample_s)
    api = FastAPI(title="runwright", version="0.1.0", lifespan=_lifespan(app, auth, depths),
                  docs_url=None, redoc_url=None,
                  description="Durable runs: submit, follow, cancel, retry.")
    install_problem_handlers(api)
    install_docs(api)
    # Added before the authentication middleware, so inside it: an unauthenticated caller
    # is answered 401 without a byte of its body read.
    api.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    api.middleware("http")(_authentication(auth))
    scopes = Scopes(app, auth)
    # In this order, the OpenAPI document lists the paths as it always has.
    add_fleet_routes(api, app, OPERATOR_ONLY)
    add_status_routes(api, app, scopes)
    add_run_routes(api, app, scopes, ping_s)
    add_thread_routes(api, scopes, ping_s)
    add_schedule_routes(api, app)
    add_worker_routes(api, scopes)
    add_question_routes(api, scopes.of)
    add_signal_routes(api, scopes)
    add_event_routes(api, scopes.of)
    add_session_routes(api, auth)
    add_dashboard_routes(api, scopes.of, depths)
    return api


def _lifespan(app: App, auth: Auth,
              depths: DepthHistory) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
        if not auth.enabled:
            event(logging.WARNING, "AUTH IS OFF: every caller sees every run (RUNWRIGHT_AUTH=off)")
        await app.open()
        # This server's life in the fleet; `runwright serve` makes it recyclable.
        member = await app.fleet.member_for("server", drain_s=DRAIN_S)
        # `serve` prints where it listens; the slot it holds (server-1) is in the census.
        member.presence_level = logging.DEBUG
        await member.join()
        await member.resync()
        await member.ready()
        sampler = asyncio.get_running_loop().create_task(depths.run(app))
        yield
        sampler.cancel()
        await member.recycling(0.0)
        await member.leave()
        await app.close()

    return lifespan


def _authentication(auth: Auth) -> Callable[[Request, CallNext], Awaitable[Response]]:
    async def authenticate(request: Request, call_next: CallNext) -> Response:
        path = request.url.path
        if (path in PUBLIC or path.startswith(PUBLIC_PREFIXES)
                or (path == SESSION_PATH and request.method in ("POST", "DELETE"))):
            return await call_next(request)
        authorization, refused = credentials(request)
        if refused is not None:
            return refused
        tenant = auth.tenant_of(authorization)
        if tenant is False:
            response = problem(401, "Unauthorized", "send Authorization: Bearer <token>")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        request.state.tenant = tenant
        asked = decode_asked(request.query_params.get(DECODE_PARAM))
        if asked is None:
            message = f"is 1 or 0 (true or false), got {request.query_params.get(DECODE_PARAM)!r}"
            return problem(422, INVALID, f"query.{DECODE_PARAM}: {message}",
                           [{"field": f"query.{DECODE_PARAM}", "message": message}])
        if asked and tenant is not None:
            return problem(403, "Operator only", "decode is the operator's: a tenant reads its own "
                                                 "runs' payloads plain already")
        if asked and not auth.operator_decode:
            return problem(403, "Operator decode off", "this server keeps tenants' encrypted payloads "
                                                       "sealed to the operator (start it with `runwright "
                                                       "serve --operator-decode` to allow decode=1)")
        if tenant is not None or not holds_keys():
            # A tenant reads its own runs plain; a server without payload keys opens no
            # envelope (it reads as it always did: nothing to decode, no run read more).
            return await call_next(request)
        view = OperatorView(decode=asked, who=auth.who(authorization, request.client.host
                                                        if request.client else "?"))
        entered = enter_view(view)  # the routes' task inherits it, and fills what it decoded
        try:
            return await call_next(request)
        finally:
            leave_view(entered)
            audit(view, request.method, path)

    return authenticate
