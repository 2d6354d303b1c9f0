"""Signing in to the dashboard once: `POST /session` checks a token and sets it as an
HttpOnly cookie, so the browser's pages (and its EventSource streams, which cannot send
headers) are authenticated without script ever holding the token.

The cookie carries the token itself, checked on every request exactly as a bearer
token is: a token removed from the configuration ends its sessions at once. It is
SameSite=Strict (another site's page never sends it), and a request it authenticates
that changes something must also carry `X-Requested-With` (a header another origin
cannot add without a CORS preflight, which this server never grants): a forged form
post is refused even from a browser that ignores SameSite."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ._auth import Auth
from ._deps import Tenant
from ._problems import problem

__all__ = ["COOKIE", "CSRF_HEADER", "SESSION_PATH", "add_session_routes", "credentials"]

COOKIE = "runwright_session"
CSRF_HEADER = "x-requested-with"
SESSION_PATH = "/session"
MAX_AGE_S = 12 * 3600  # a working day; signing in again sets a fresh one
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class SessionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=4096, description="A tenant's or the operator's token.")


class SessionOut(BaseModel):
    tenant: str | None = Field(description="The caller's tenant; null: the operator.")
    operator: bool
    auth: bool = Field(description="False when the server runs without auth (RUNWRIGHT_AUTH=off): "
                                   "every caller is the operator, and there is nothing to sign in to.")
    operator_decode: bool = Field(False, description=(
        "The operator may read tenants' encrypted payloads plain by asking (`decode=1`, the "
        "dashboard's decode switch): the server runs with --operator-decode. False for a tenant."))


def credentials(request: Request) -> tuple[str | None, Response | None]:
    """The Authorization value of a request: its header, else its session cookie; or a
    refusal when a cookie-authenticated request changes something without the header."""
    header = request.headers.get("authorization")
    if header is not None:
        return header, None
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return None, None
    if request.method not in SAFE_METHODS and CSRF_HEADER not in request.headers:
        return None, problem(403, "Forbidden", f"a {request.method} authenticated by the session "
                                                f"cookie must carry the X-Requested-With header")
    return f"Bearer {cookie}", None


def add_session_routes(api: FastAPI, auth: Auth) -> None:
    @api.post(SESSION_PATH, response_model=SessionOut, openapi_extra={"security": []},
              responses={401: {"description": "The token is not one of this server's"}})
    async def sign_in(body: SessionIn, request: Request, response: Response) -> Any:
        """Sign in: the token is checked, then set as an HttpOnly session cookie."""
        tenant = auth.tenant_of(f"Bearer {body.token}")
        if tenant is False:
            return problem(401, "Unauthorized", "that token is not one of this server's")
        response.set_cookie(COOKIE, body.token.strip(), max_age=MAX_AGE_S, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https", path="/")
        return SessionOut(tenant=tenant if isinstance(tenant, str) else None, operator=tenant is None,
                          auth=auth.enabled, operator_decode=tenant is None and auth.operator_decode)

    @api.get(SESSION_PATH, response_model=SessionOut)
    async def whoami(who: Tenant) -> SessionOut:
        """Who the caller is: its tenant, or the operator."""
        return SessionOut(tenant=who, operator=who is None, auth=auth.enabled,
                          operator_decode=who is None and auth.operator_decode)

    @api.delete(SESSION_PATH, status_code=204, openapi_extra={"security": []})
    async def sign_out() -> Response:
        """Sign out: the session cookie is cleared."""
        response = Response(status_code=204)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response
