"""The `webhook` job: one HTTP call, with a timeout, a response size cap, an HMAC-SHA256
signature, retries where a retry can help, and a refusal of private targets.

- Retried (the run's backoff): timeouts, connection errors, 5xx (and 429).
- Final (`failed` at once): other 4xx, a response over the cap, a refused target.
- Signed with one of the operator's named secrets (`outbound`): the default one when the
  job names none, else the one `secret` names (an unknown name is a final error; a
  submitter never chooses which of the worker's variables signs). Header
  `X-Runwright-Signature: t=<unix time>,v1=<hex>` where hex is HMAC-SHA256(secret,
  "<t>.<body>"), so a receiver can check both origin and freshness.
- Refused unless the operator allows it (RUNWRIGHT_WEBHOOK_ALLOW): targets whose address
  (after DNS resolution) is private, loopback, link-local, reserved or multicast, also when
  embedded in an IPv6 address (`addresses`). The check resolves the name just before the
  call; a DNS answer that changes in between is not caught (httpx cannot pin the checked
  address for TLS).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import BadArguments, ConfigError, FinalError, RunwrightError
from ._addresses import parse, refusal
from ._outbound import ALLOW_ENV, OutboundPolicy, UnknownSecret

if TYPE_CHECKING:
    import httpx

    from ..tasks._registry import Registry
    from ..tasks._specs import TaskSpec

__all__ = ["CALLBACK_FIELDS", "WEBHOOK", "WebhookRefused", "call_back", "call_checked", "check_callback",
           "register_webhook", "signature_header"]

WEBHOOK = "webhook"
SIGNATURE_HEADER = "X-Runwright-Signature"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# What a job's `callback` may say (the llm and chain jobs): where, and which of the
# operator's secrets signs it. Private targets and keys stay the operator's settings.
CALLBACK_FIELDS = frozenset({"url", "headers", "timeout_s", "secret"})


class WebhookRefused(FinalError):
    """A webhook that must not be made, or whose answer no retry can change."""


class WebhookRetryable(RunwrightError, RuntimeError):
    """A webhook that failed in a way a later attempt may not (5xx, 429)."""


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def register_webhook(registry: Registry) -> TaskSpec:
    @registry.task(name=WEBHOOK, retries=5, give_up_on=[WebhookRefused])
    async def webhook(url: str, method: str = "POST", headers: dict[str, str] | None = None,
                      body: Any = None, timeout_s: float = 10.0, max_response_bytes: int = 1 << 20,
                      secret: str | None = None) -> dict[str, Any]:
        """Make one HTTP call; the result is the status, and the body as text (or JSON).
        `secret` names one of the operator's signing secrets (default: the default one)."""
        return await call_checked(url, method, headers, body, timeout_s, max_response_bytes, secret)

    return webhook


async def call_checked(url: str, method: str, headers: dict[str, str] | None, body: Any,
                       timeout_s: float, max_response_bytes: int,
                       secret: str | None = None) -> dict[str, Any]:
    """The webhook itself: checked target, signed body, capped answer (also used by `llm`
    for its callback). What signs and what may be called are the operator's (`outbound`)."""
    method = method.upper()
    if method not in METHODS:
        raise WebhookRefused(f"method {method!r} is not one of {', '.join(METHODS)}")
    policy, key = _policy_and_key(secret)
    await _check_target(url, policy)
    payload = b"" if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if key:
        sent[SIGNATURE_HEADER] = signature_header(key, int(time.time()), payload)
    return await _call(method, url, sent, payload, timeout_s, max_response_bytes)


def check_callback(job: str, callback: Any) -> None:
    """Refuse (at submission) a callback that is not a dict of the known fields, with a url."""
    if callback is None:
        return
    if not isinstance(callback, dict) or not isinstance(callback.get("url"), str):
        raise BadArguments(f"{job}: `callback` must be an object with a `url`")
    unknown = sorted(set(callback) - CALLBACK_FIELDS)
    if unknown:
        raise BadArguments(f"{job}: `callback` has unknown fields {unknown}; it takes "
                           f"{sorted(CALLBACK_FIELDS)} (private targets and signing keys are the "
                           f"operator's settings, not a job's)")


async def call_back(callback: dict[str, Any], body: Any) -> dict[str, Any]:
    """POST `body` to a checked callback: signed, to an allowed target, as the webhook job."""
    return await call_checked(callback.get("url", ""), "POST", callback.get("headers"), body,
                              float(callback.get("timeout_s", 10)), 1 << 20, callback.get("secret"))


def _policy_and_key(secret: str | None) -> tuple[OutboundPolicy, str | None]:
    """The worker's outbound policy and the signing key; a bad name or setting is final
    (the run ends `failed` saying which; `retry` it once the operator has fixed it)."""
    try:
        policy = OutboundPolicy.from_env()
        return policy, policy.secret(secret)
    except (ConfigError, UnknownSecret) as exc:
        raise WebhookRefused(f"webhook not sent: {exc}") from None


async def _call(method: str, url: str, headers: dict[str, str], payload: bytes, timeout_s: float,
                max_response_bytes: int) -> dict[str, Any]:
    import httpx  # here: 60 ms to import, paid by every worker and CLI call otherwise

    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
        try:
            async with client.stream(method, url, headers=headers, content=payload or None) as response:
                body = await _read_capped(response, max_response_bytes, url)
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise WebhookRetryable(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise WebhookRetryable(f"{method} {url} answered {response.status_code}")
    if response.status_code >= 400:
        raise WebhookRefused(f"{method} {url} answered {response.status_code}: {body[:200]!r}")
    return {"status": response.status_code, "body": _decoded(body, response)}


async def _read_capped(response: httpx.Response, cap: int, url: str) -> str:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise WebhookRefused(f"{url}: response over max_response_bytes={cap}")
        chunks.append(chunk)
    return b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")


def _decoded(body: str, response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").startswith("application/json"):
        try:
            return json.loads(body)
        except ValueError:
            pass
    return body


async def _check_target(url: str, policy: OutboundPolicy) -> None:
    """Refuse a target any of whose addresses is not public, unless the operator allows it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"{url!r} is not an http(s) URL")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, parts.port or 443,
                                                             type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WebhookRetryable(f"{parts.hostname}: cannot resolve: {exc}") from exc
    for info in infos:
        address = parse(str(info[4][0]))
        why = refusal(address)
        if why is not None and not policy.allows(parts.hostname, address):
            raise WebhookRefused(f"{url}: {parts.hostname} resolves to {address}, {why}; the "
                                 f"operator allows such targets with {ALLOW_ENV} on the worker")
