"""Errors as application/problem+json (RFC 9457): a title, a status and a detail; a 422's
also `errors`, each field it names with what is wrong with it (the OpenAPI document
publishes that shape as every operation's 422)."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match, Route

from ..errors import (
    DeploymentMoved,
    InvalidInput,
    InvalidTransition,
    KeyConflict,
    PayloadUnreadable,
    QuestionNotFound,
    RunExpired,
    RunNotFound,
    ScheduleNotFound,
    SignalsFull,
    SingletonTaken,
    StoreError,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
    UpdateTimeout,
)
from ..tasks._serde import MAX_DEPTH
from ._models import SUBMIT_TAGS

__all__ = ["OperatorOnly", "SealedToOperator", "install_problem_handlers", "problem", "problem_of"]

log = logging.getLogger("runwright.server")


class OperatorOnly(Exception):
    """A tenant's token asked for what is the deployment's (403, never 404: the resource
    is no tenant's, so its existence reveals nothing)."""

class SealedToOperator(Exception):
    """The operator asked for what would compute over a tenant's payloads, which are sealed
    to it (server._decode): 403."""


# Every 422's title, whichever layer refused the input: the request's validation (an
# unknown field, a query parameter), the App's check (a task's arguments), the body parser.
INVALID = "Invalid input"

# Each error type and the status and title it answers with (first match wins).
STATUS = [
    (RunExpired, 410, "Run expired"),
    (RunNotFound, 404, "Not found"),
    (ThreadNotFound, 404, "Not found"),
    (ScheduleNotFound, 404, "Not found"),
    (QuestionNotFound, 404, "Not found"),
    (ThreadDeleted, 410, "Thread deleted"),
    (ThreadBusy, 409, "Thread busy"),
    (KeyConflict, 409, "Key conflict"),
    (SingletonTaken, 409, "Singleton key taken"),
    (SignalsFull, 429, "Too many pending signals"),
    (UpdateTimeout, 504, "Update timed out"),
    (InvalidTransition, 409, "Not allowed in this state"),
    (InvalidInput, 422, INVALID),
    (OperatorOnly, 403, "Operator only"),
    (SealedToOperator, 403, "Sealed to the operator"),
    # Sealed by `runwright move` (Retry-After: the seal's reckoned length), or its
    # tombstone: the detail names the store the deployment went to.
    (DeploymentMoved, 503, "Deployment moving"),
    (StoreError, 503, "Store unavailable"),
    # A stored payload under a key this server was not given: the deployment's setting to
    # fix (the detail names the key id), not the caller's request.
    (PayloadUnreadable, 500, "Payload unreadable"),
]


FieldErrors = list[dict[str, str]]  # [{"field": "body.args.n", "message": "..."}]


def problem(status: int, title: str, detail: str, errors: FieldErrors | None = None) -> JSONResponse:
    """A problem; a 422 always carries `errors` (empty when it names no field)."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if status == 422:
        body["errors"] = errors or []
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


def problem_of(exc: BaseException) -> dict[str, Any]:
    """The problem an error answers with, as a body (for an answer whose status is sent
    already: a stream's last line); an error of no known kind is ours (500), logged."""
    for kind, status, title in STATUS:
        if isinstance(exc, kind):
            return {"type": "about:blank", "title": title, "status": status, "detail": str(exc)}
    log.error("a streamed answer failed", exc_info=exc)
    return {"type": "about:blank", "title": "Internal Server Error", "status": 500,
            "detail": "the server failed to finish this answer; its log has the error"}


def install_problem_handlers(api: FastAPI) -> None:
    for kind, status, title in STATUS:
        api.add_exception_handler(kind, _handler(status, title))

    async def invalid_request(_request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, RequestValidationError):  # the only kind it is installed for
            raise exc
        # A check of `inputs` raised InvalidInput (a ValueError): its words, without the
        # "Value error, " Pydantic puts before them.
        errors = [{"field": ".".join(map(str, _shown(e["loc"]))),
                   "message": str(e["msg"]).removeprefix("Value error, ")} for e in exc.errors()]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem(422, INVALID, detail, errors)

    api.add_exception_handler(RequestValidationError, invalid_request)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own answers (404 no such path, 405 with its Allow header, a body its
        # JSON parser gave up on) as problems too; a body nested too deep (RecursionError)
        # says why, as encoding the same value would have.
        if not isinstance(exc, HTTPException):  # the only kind it is installed for
            raise exc
        if isinstance(exc.__cause__, RecursionError):
            return problem(422, INVALID, f"the request body is nested deeper than the "
                                                 f"limit of {MAX_DEPTH} levels")
        headers = dict(exc.headers or {})
        detail = str(exc.detail)
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed(request))
            detail = f"{request.method} is not allowed on {request.url.path}; allowed: {headers['Allow']}"
        elif exc.status_code == 404:
            detail = f"no such path: {request.url.path} (the API is described at /docs)"
        title = INVALID if exc.status_code == 422 else HTTPStatus(exc.status_code).phrase
        answer = problem(exc.status_code, title, detail)
        answer.headers.update(headers)
        return answer

    api.add_exception_handler(HTTPException, http_error)

    async def unexpected(_request: Request, _exc: Exception) -> Response:
        # The error itself goes to the server's log (Starlette re-raises it after this
        # answer); the caller learns only that it was ours.
        return problem(500, "Internal Server Error", "the server failed to answer this request; "
                                                     "its log has the error")

    api.add_exception_handler(Exception, unexpected)
    _publish_validation_problem(api)


def _allowed(request: Request) -> list[str]:
    """Every method some route of this path takes (Starlette names only the first route's)."""
    return sorted({method for route in request.app.router.routes if isinstance(route, Route)
                   and route.matches(request.scope)[0] is not Match.NONE for method in route.methods or ()})


def _shown(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Where a validation error is, without the tag of the model that checked the body."""
    if len(loc) > 1 and loc[0] == "body" and loc[1] in SUBMIT_TAGS:
        return (loc[0], *loc[2:])
    return loc


def _handler(status: int, title: str) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        # The fields an App's InvalidInput names are a submission's arguments ("args.n"),
        # which every route that takes them has in its body.
        fields = exc.fields if isinstance(exc, InvalidInput) else []
        answer = problem(status, title, str(exc), [{"field": f"body.{where}", "message": what}
                                                   for where, what in fields])
        if isinstance(exc, DeploymentMoved) and exc.retry_after_s is not None:
            answer.headers["Retry-After"] = str(exc.retry_after_s)
        return answer

    return handle


# What every 422 answers, as the OpenAPI document publishes it (FastAPI's default there
# is its own JSON, which this server never sends).
VALIDATION_PROBLEM = {
    "title": "ValidationProblem", "type": "object",
    "description": "application/problem+json (RFC 9457), with each field the input names.",
    "required": ["type", "title", "status", "detail", "errors"],
    "properties": {
        "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
        "detail": {"type": "string", "description": "Every problem, in one line."},
        "errors": {"type": "array", "items": {"$ref": "#/components/schemas/FieldError"},
                   "description": "Each problem that names a field (none when it names none)."},
    },
}
FIELD_ERROR = {
    "title": "FieldError", "type": "object", "required": ["field", "message"],
    "properties": {
        "field": {"type": "string", "description": "Where, dotted: body.args.n, query.limit, path.run_id."},
        "message": {"type": "string", "description": "What is wrong with it."},
    },
}


def _publish_validation_problem(api: FastAPI) -> None:
    """Every operation's 422 in the OpenAPI document is the ValidationProblem it answers."""
    made = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            schema = made()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            schemas.update(ValidationProblem=VALIDATION_PROBLEM, FieldError=FIELD_ERROR)
            for operation in (op for item in schema.get("paths", {}).values() for op in item.values()):
                if "422" in operation.get("responses", {}):
                    operation["responses"]["422"] = {
                        "description": "Invalid input: each field named in `errors`",
                        "content": {"application/problem+json": {
                            "schema": {"$ref": "#/components/schemas/ValidationProblem"}}}}
        return api.openapi_schema or {}

    api.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way
