"""Errors as application/problem+json (RFC 9457): a title, a status and a detail."""

from __future__ import annotations

from typing import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..errors import (
    InvalidInput,
    InvalidTransition,
    RunNotFound,
    StoreError,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
)

__all__ = ["OperatorOnly", "install_problem_handlers", "problem"]


class OperatorOnly(Exception):
    """A tenant's token asked for what is the deployment's (403, never 404: the resource
    is no tenant's, so its existence reveals nothing)."""

# Each error type and the status and title it answers with (first match wins).
STATUS = [
    (RunNotFound, 404, "Not found"),
    (ThreadNotFound, 404, "Not found"),
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


def _handler(status: int, title: str) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        return problem(status, title, str(exc))

    return handle
