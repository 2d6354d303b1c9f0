"""Errors as application/problem+json (RFC 9457): a title, a status and a detail."""

from __future__ import annotations

from http import HTTPStatus
from typing import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match, Route

from ..errors import (
    InvalidInput,
    InvalidTransition,
    KeyConflict,
    QuestionNotFound,
    RunExpired,
    RunNotFound,
    ScheduleNotFound,
    StoreError,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
)
from ..tasks._serde import MAX_DEPTH
from ._models import SUBMIT_TAGS

__all__ = ["OperatorOnly", "install_problem_handlers", "problem"]


class OperatorOnly(Exception):
    """A tenant's token asked for what is the deployment's (403, never 404: the resource
    is no tenant's, so its existence reveals nothing)."""

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
    (InvalidTransition, 409, "Not allowed in this state"),
    (InvalidInput, 422, "Invalid input"),
    (OperatorOnly, 403, "Operator only"),
    (StoreError, 503, "Store unavailable"),
]


def problem(status: int, title: str, detail: str) -> JSONResponse:
    return JSONResponse({"type": "about:blank", "title": title, "status": status, "detail": detail},
                        status_code=status, media_type="application/problem+json")


def install_problem_handlers(api: FastAPI) -> None:
    for kind, status, title in STATUS:
        api.add_exception_handler(kind, _handler(status, title))

    async def invalid_request(_request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, RequestValidationError):  # the only kind it is installed for
            raise exc
        # A check of `inputs` raised InvalidInput (a ValueError): its words, without the
        # "Value error, " Pydantic puts before them.
        detail = "; ".join(f"{'.'.join(map(str, _shown(e['loc'])))}: {e['msg'].removeprefix('Value error, ')}"
                           for e in exc.errors())
        return problem(422, "Invalid request", detail)

    api.add_exception_handler(RequestValidationError, invalid_request)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own answers (404 no such path, 405 with its Allow header, a body its
        # JSON parser gave up on) as problems too; a body nested too deep (RecursionError)
        # says why, as encoding the same value would have.
        if not isinstance(exc, HTTPException):  # the only kind it is installed for
            raise exc
        if isinstance(exc.__cause__, RecursionError):
            return problem(422, "Invalid input", f"the request body is nested deeper than the "
                                                 f"limit of {MAX_DEPTH} levels")
        headers = dict(exc.headers or {})
        detail = str(exc.detail)
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed(request))
            detail = f"{request.method} is not allowed on {request.url.path}; allowed: {headers['Allow']}"
        elif exc.status_code == 404:
            detail = f"no such path: {request.url.path} (the API is described at /docs)"
        answer = problem(exc.status_code, HTTPStatus(exc.status_code).phrase, detail)
        answer.headers.update(headers)
        return answer

    api.add_exception_handler(HTTPException, http_error)

    async def unexpected(_request: Request, _exc: Exception) -> Response:
        # The error itself goes to the server's log (Starlette re-raises it after this
        # answer); the caller learns only that it was ours.
        return problem(500, "Internal Server Error", "the server failed to answer this request; "
                                                     "its log has the error")

    api.add_exception_handler(Exception, unexpected)


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
        return problem(status, title, str(exc))

    return handle
