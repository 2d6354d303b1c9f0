"""What routes depend on: the caller's tenant and scope, the operator-only guard, and
what each path, query and header value may be (bounds and checks from `runwright.core._inputs`,
the same the library and the CLI apply: a bad value is a 422 problem before a route runs).

At module level, and imported by each module of routes: FastAPI resolves (string)
annotations in the namespace of the module that defines the route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Callable

from fastapi import Depends, Header, Query, Request
from fastapi import Path as FastAPIPath
from pydantic import AfterValidator

from ..client._listing import MAX_SEARCH_CHARS
from ..core import _inputs as inputs
from ..core._inputs import (
    MAX_ID,
    MAX_KEY_CHARS,
    MAX_NAME_CHARS,
    MAX_QUEUE_CHARS,
    MAX_SEQ,
    MAX_TENANT_CHARS,
    MAX_THREAD_CHARS,
)
from ._problems import OperatorOnly

if TYPE_CHECKING:
    from ..app import App
    from ..client._scope import RunScope
    from ._auth import Auth

__all__ = ["MAX_ID", "OPERATOR_ONLY", "After", "Before", "ErrorFilter", "Incarnation", "KeyFilter",
           "LastEventId",
           "NameFilter", "QueueFilter", "RunId", "Scopes", "Tenant", "TenantFilter", "ThreadFilter",
           "ThreadName"]


@dataclass(frozen=True)
class Scopes:
    """Each request acts through the caller's scope: the tenant's view of the App when auth
    is on (so another tenant's run is a 404, keys and threads are the tenant's own), the
    App itself when auth is off (local use: every run is visible). One object for every
    module of routes, so that rule is written once."""

    app: App
    auth: Auth

    def of(self, who: str | None) -> RunScope:
        """The caller's view: another tenant's run answers 404, never 403 (ids are not probed)."""
        return self.app if who is None or not self.auth.enabled else self.app.tenant(who)

    def narrowed(self, who: str | None, tenant: str | None) -> RunScope:
        """The caller's view, narrowed to `tenant`: the operator may look at any tenant's
        runs and threads this way, a tenant only at its own."""
        if tenant is None or tenant == who:
            return self.of(who)
        if who is not None:
            raise OperatorOnly(f"the runs of tenant {tenant!r} are not yours: the tenant filter is "
                               f"the operator's")
        return self.app.tenant(tenant)


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
RunId = Annotated[int, FastAPIPath(ge=1, le=MAX_ID)]
Before = Annotated[int | None, Query(ge=1, le=MAX_ID)]
After = Annotated[int, Query(ge=0, le=MAX_SEQ)]
# Which thread of a name a reader reads (GET /threads/{thread} gives it): once the name
# names another thread, 410.
Incarnation = Annotated[int | None, Query(ge=1, le=MAX_ID)]


def _unless_none(check: Callable[[Any], Any]) -> AfterValidator:
    """`check` as a validator of an optional value (None, not given, passes)."""
    return AfterValidator(lambda value: value if value is None else check(value))


# A thread's name in a path, and the text filters of a query: `inputs` says what each
# may be (a NUL, a control character, a name too long: 422, never the store's error).
ThreadName = Annotated[str, FastAPIPath(min_length=1, max_length=MAX_THREAD_CHARS),
                       AfterValidator(inputs.thread_name)]
ThreadFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_THREAD_CHARS),
                         _unless_none(inputs.thread_name)]
KeyFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_KEY_CHARS), _unless_none(inputs.key)]
NameFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_NAME_CHARS),
                      _unless_none(lambda value: inputs.name(value, "task"))]
QueueFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_QUEUE_CHARS),
                        _unless_none(inputs.queue)]
# A search of the runs' errors (their type, message and traceback), kept short.
ErrorFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_SEARCH_CHARS,
                                          description="Runs whose error contains this text (its "
                                                      "type, message or traceback; ASCII letters "
                                                      "in any case)."),
                        _unless_none(lambda value: inputs.name(value, "error", MAX_SEARCH_CHARS))]
# The operator's filter to one tenant's runs or threads (a tenant may name only itself).
TenantFilter = Annotated[str | None, Query(min_length=1, max_length=MAX_TENANT_CHARS),
                         _unless_none(inputs.tenant)]
# What an EventSource sends back when it reconnects: the id of the last event it got.
LastEventId = Annotated[str | None, Header(max_length=64, description="The id of the last event a "
                                                                      "reconnecting client got.")]
