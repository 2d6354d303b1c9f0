"""The operator's view of tenants' payloads: sealed unless the operator decodes.

A tenant reads its own runs plain (the API is transparent to it), and an operator token
reads the deployment's own runs (no tenant's) plain. What an operator token (or any
caller of a server with auth off: the operator too) reads of a *tenant's* run — its
arguments, result, steps, events, state, thread history — shows each encrypted payload as
a placeholder, `{"~sealed": {"key": "<key id>", "bytes": N}}`, even on a server that holds
the keys: holding the keys to serve tenants is not a licence for whoever runs the
deployment to read them. As Temporal's Web UI shows encoded payloads unless a codec
server is configured, two things must both be true for the operator to read them plain:
the server was started with `runwright serve --operator-decode` (off by default), and the
request asks, `?decode=1` (the dashboard's "decode" switch). A tenant's token asking is
refused (403), as is an operator's on a server without the switch. Every request whose
answer held a tenant's payloads decoded logs one audit line (WARNING): who (the operator
token's fingerprint, or the caller's address with auth off), which runs or thread, the
request, at the log line's time.

A server without payload keys has no view to enter: it opens no envelope, and its
operator's reads cost what they always did (the view reads a run's tenant first).
"""

from __future__ import annotations

import hashlib
import logging
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core._payloads import sealing
from ..observe._logs import event

if TYPE_CHECKING:
    from ..client._scope import RunScope

__all__ = ["DECODE_PARAM", "OperatorView", "audit", "decode_asked", "enter_view", "leave_view", "seal_run",
           "seal_tenant", "sealed_for", "token_fingerprint"]

DECODE_PARAM = "decode"
_YES, _NO = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

# Set by the authentication middleware for a request of the operator's, None otherwise
# (a tenant's request reads its own runs, plain).
_VIEW: ContextVar[OperatorView | None] = ContextVar("runwright_operator_view", default=None)


@dataclass
class OperatorView:
    """One operator request: whether it decodes (the server's switch on and the request
    asked), who asked (for the audit), and what it decoded (filled as the answer is made)."""

    decode: bool
    who: str
    decoded: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        if what not in self.decoded:
            self.decoded.append(what)


def decode_asked(value: str | None) -> bool | None:
    """The `decode` query parameter read: True, False, or None for a value it cannot mean."""
    if value is None:
        return False
    text = value.strip().lower()
    return True if text in _YES else False if text in _NO else None


def token_fingerprint(token: str) -> str:
    """Who an operator token is, in a log others read: its SHA-256's first 12 hex digits."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def enter_view(view: OperatorView | None) -> Token[OperatorView | None]:
    """The request's view, from here on in this context; `leave_view` with the token ends it."""
    return _VIEW.set(view)


def leave_view(token: Token[OperatorView | None]) -> None:
    _VIEW.reset(token)


def sealed_for(tenant: str | None, what: str) -> bool:
    """Whether this request shows the payloads of `what` (a run, a thread) of `tenant`
    sealed. A decode is noted for the audit line."""
    view = _VIEW.get()
    if view is None or tenant is None:
        return False
    if view.decode:
        view.note(f"{what} (tenant {tenant})")
        return False
    return True


def seal_tenant(tenant: str | None, what: str) -> bool:
    """For a request that reads one run or thread of `tenant` (a read: nothing written from
    what it loads): its payloads sealed for the rest of the request, per `sealed_for`.
    Whether they are."""
    sealed = sealed_for(tenant, what)
    if sealed:
        sealing(True)
    return sealed


async def seal_run(scope: RunScope, run_id: int) -> bool:
    """`seal_tenant` for a read of one run's payloads (events, steps, state): the run's
    tenant read first, in the operator's requests only (a tenant's scope is its own runs)."""
    if _VIEW.get() is None:
        return False
    return seal_tenant((await scope.read_run(run_id)).tenant, f"run {run_id}")


def audit(view: OperatorView, method: str, path: str) -> None:
    """One line for a request that decoded a tenant's payloads."""
    if view.decoded:
        request = f"{method} {path}"
        read = ", ".join(view.decoded)
        event(logging.WARNING, f"operator decode: {view.who} read {read} plain ({request})",
              who=view.who, decoded=view.decoded, request=request)

