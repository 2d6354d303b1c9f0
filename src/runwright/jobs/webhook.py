"""The `webhook` job: one HTTP call, with a timeout, a response size cap, an HMAC-SHA256
signature, retries where a retry can help, and a refusal of private targets.

- Retried (the run's backoff): timeouts, connection errors, 5xx (and 429).
- Final (`failed` at once): other 4xx, a response over the cap, a refused target.
- Signed when a secret is configured (RUNWRIGHT_WEBHOOK_SECRET, or `secret_env` naming
  another variable): header `X-Runwright-Signature: t=<unix time>,v1=<hex>` where hex is
  HMAC-SHA256(secret, "<t>.<body>"), so a receiver can check both origin and freshness.
- Refused unless `allow_private`: targets whose address (after DNS resolution) is
  private, loopback, link-local, reserved or multicast. The check resolves the name just
  before the call; a DNS answer that changes in between is not caught (httpx cannot pin
  the checked address for TLS).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import os
import socket
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from ..errors import FinalError, RunwrightError

if TYPE_CHECKING:
    from ..registry import Registry
    from ..tasks import TaskSpec

__all__ = ["WEBHOOK", "WebhookRefused", "call_checked", "register_webhook", "signature_header"]

WEBHOOK = "webhook"
SIGNATURE_HEADER = "X-Runwright-Signature"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


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
                      allow_private: bool = False,
                      secret_env: str = "RUNWRIGHT_WEBHOOK_SECRET") -> dict[str, Any]:
        """Make one HTTP call; the result is the status, and the body as text (or JSON)."""
        return await call_checked(url, method, headers, body, timeout_s, max_response_bytes,
                                  allow_private, secret_env)

    return webhook


async def call_checked(url: str, method: str, headers: dict[str, str] | None, body: Any,
                       timeout_s: float, max_response_bytes: int, allow_private: bool,
                       secret_env: str) -> dict[str, Any]:
    """The webhook itself: checked target, signed body, capped answer (also used by `llm`
    for its callback)."""
    method = method.upper()
    if method not in METHODS:
        raise WebhookRefused(f"method {method!r} is not one of {', '.join(METHODS)}")
    await _check_target(url, allow_private)
    payload = b"" if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    secret = os.environ.get(secret_env)
    if secret:
        sent[SIGNATURE_HEADER] = signature_header(secret, int(time.time()), payload)
    return await _call(method, url, sent, payload, timeout_s, max_response_bytes)


async def _call(method: str, url: str, headers: dict[str, str], payload: bytes, timeout_s: float,
                max_response_bytes: int) -> dict[str, Any]:
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


async def _check_target(url: str, allow_private: bool) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused(f"{url!r} is not an http(s) URL")
    if allow_private:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(parts.hostname, parts.port or 443,
                                                             type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WebhookRetryable(f"{parts.hostname}: cannot resolve: {exc}") from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global or address.is_multicast:
            raise WebhookRefused(f"{url}: {parts.hostname} resolves to {address}, a private, loopback "
                                 f"or link-local address; pass allow_private=true to call it")
