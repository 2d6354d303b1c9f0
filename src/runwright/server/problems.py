"""Errors as application/problem+json (RFC 9457): a title, a status and a detail."""

from __future__ import annotations

from typing import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ..errors import (
    InvalidInput,
    InvalidTransition,
    QuestionNotFound,
    RunExpired,
    RunNotFound,
    StoreError,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
)
from ..serde import MAX_DEPTH

__all__ = ["OperatorOnly", "install_problem_handlers", "problem"]


class OperatorOnly(Exception):
    """A tenant's token asked for what is the deployment's (403, never 404: the resource
    is no tenant's, so its existence reveals nothing)."""

# Each error type and the status and title it answers with (first match wins).
STATUS = [
    (RunExpired, 410, "Run expired"),
    (RunNotFound, 404, "Not found"),
    (ThreadNotFound, 404, "Not found"),
    (QuestionNotFound, 404, "Not found"),
    (ThreadDeleted, 410, "Thread deleted"),
    (ThreadBusy, 409, "Thread busy"),
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
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return problem(422, "Invalid request", detail)

    api.add_exception_handler(RequestValidationError, invalid_request)

    async def unparsable_body(request: Request, exc: Exception) -> Response:
        # FastAPI answers a body its JSON parser gave up on (RecursionError: nested too
        # deep) with a bare 400; say why, as encoding the same value would have.
        if not isinstance(exc, HTTPException):  # the only kind it is installed for
            raise exc
        if isinstance(exc.__cause__, RecursionError):
            return problem(422, "Invalid input", f"the request body is nested deeper than the "
                                                 f"limit of {MAX_DEPTH} levels")
        return await http_exception_handler(request, exc)

    api.add_exception_handler(HTTPException, unparsable_body)


def _handler(status: int, title: str) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        return problem(status, title, str(exc))

    return handle
