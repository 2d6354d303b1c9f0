"""What routes depend on: the caller's tenant, the operator-only guard, id bounds.

At module level, and imported by each module of routes: FastAPI resolves (string)
annotations in the namespace of the module that defines the route."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi import Path as FastAPIPath

from .problems import OperatorOnly

__all__ = ["MAX_ID", "OPERATOR_ONLY", "After", "Before", "Incarnation", "RunId", "Tenant"]


def _tenant(request: Request) -> str | None:
    """The caller's tenant, set by the authentication middleware."""
    tenant: str | None = request.state.tenant
    return tenant


def _operator(request: Request) -> None:
    """Admit the operator only (an operator token, or auth off: both are tenant None)."""
    if request.state.tenant is not None:
        raise OperatorOnly(f"{request.method} {request.url.path} is the operator's: it concerns "
                           f"the whole deployment (send a token of RUNWRIGHT_OPERATOR_TOKENS)")


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
# Which thread of a name a reader reads (GET /threads/{thread} gives it): once the name
# names another thread, 410.
Incarnation = Annotated[int | None, Query(ge=1, le=MAX_ID)]
