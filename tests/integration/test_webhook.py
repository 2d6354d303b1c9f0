"""The webhook job against a real local HTTP receiver, on every backend."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

import runwright as rw
from runwright.store._params import EventListParams, RunCountParams

from .conftest import running_worker

SECRET = "s3cret"


class Receiver:
    """Answers each request with `answer(index)` -> (status, body, delay_s); records them."""

    def __init__(self, answer: Callable[[int], tuple[int, str, float]]) -> None:
        self.requests: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                status, text, delay_s = answer(len(receiver.requests) - 1)
                time.sleep(delay_s)
                payload = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def verified(request: dict[str, Any]) -> bool:
    """What a receiver does: recompute the HMAC over "<t>.<body>" and compare."""
    fields = dict(part.split("=", 1) for part in request["headers"]["X-Runwright-Signature"].split(","))
    expected = hmac.new(SECRET.encode(), f"{fields['t']}.".encode() + request["body"], hashlib.sha256)
    fresh = abs(time.time() - int(fields["t"])) < 60
    return hmac.compare_digest(expected.hexdigest(), fields["v1"]) and fresh


@pytest.fixture
def secret(monkeypatch) -> None:
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_SECRET", SECRET)


@pytest.fixture
def loopback_allowed(monkeypatch) -> None:
    """The operator lets this worker call the local receiver (the job cannot)."""
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_ALLOW", "127.0.0.1")


async def test_a_signed_call_retried_on_503(app, secret, loopback_allowed):
    receiver = Receiver(lambda i: (503, "busy", 0) if i == 0 else (200, '{"ok": true}', 0))
    try:
        async with running_worker(app):
            run = await app.submit("webhook", url=receiver.url, body={"event": "paid"})
            assert await run.result(timeout_s=60) == {"status": 200, "body": {"ok": True}}
    finally:
        receiver.close()
    assert len(receiver.requests) == 2 and all(verified(r) for r in receiver.requests)
    assert json.loads(receiver.requests[0]["body"]) == {"event": "paid"}
    kinds = [e.kind for e in await app.store.event_list(EventListParams(run.id))]
    assert kinds.count("retrying") == 1


async def test_a_4xx_is_not_retried(app, secret, loopback_allowed):
    receiver = Receiver(lambda i: (400, '{"error": "bad"}', 0))
    try:
        async with running_worker(app):
            run = await app.submit("webhook", url=receiver.url, body={})
            with pytest.raises(rw.RunFailed, match="ended failed: WebhookRefused: POST .* answered 400"):
                await run.result(timeout_s=30)
    finally:
        receiver.close()
    assert len(receiver.requests) == 1


async def test_loopback_is_refused_unless_allowed_and_nothing_is_sent(app):
    receiver = Receiver(lambda i: (200, "{}", 0))
    try:
        async with running_worker(app):
            run = await app.submit("webhook", url=receiver.url, body={})
            with pytest.raises(rw.RunFailed, match="resolves to 127.0.0.1, a private, loopback"):
                await run.result(timeout_s=30)
            private = await app.submit("webhook", url="http://10.1.2.3/x")
            with pytest.raises(rw.RunFailed, match="resolves to 10.1.2.3"):
                await private.result(timeout_s=30)
    finally:
        receiver.close()
    assert receiver.requests == []


async def test_a_slow_receiver_times_out_and_an_oversized_answer_fails(app, loopback_allowed):
    receiver = Receiver(lambda i: (200, '{"late": true}', 1.0) if i == 0 else (200, "x" * 5000, 0))
    try:
        async with running_worker(app):
            slow = await app.submit("webhook", url=receiver.url, timeout_s=0.2,
                                    max_response_bytes=100)
            with pytest.raises(rw.RunFailed, match="over max_response_bytes=100"):
                await slow.result(timeout_s=60)
    finally:
        receiver.close()
    events = await app.store.event_list(EventListParams(slow.id))
    errors = [e.data["error"] for e in events if e.kind == "retrying"]
    assert len(errors) == 1 and "ReadTimeout" in errors[0]  # the first attempt timed out


async def test_bad_webhook_input_is_refused_at_submission(app):
    with pytest.raises(rw.BadArguments):
        await app.submit("webhook", uri="http://example.com")
    assert await app.store.run_count_by_state(RunCountParams()) == {}


def signed_with(key: str, request: dict[str, Any]) -> bool:
    fields = dict(part.split("=", 1) for part in request["headers"]["X-Runwright-Signature"].split(","))
    expected = hmac.new(key.encode(), f"{fields['t']}.".encode() + request["body"], hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), fields["v1"])


async def test_only_the_operators_named_secrets_sign(app, loopback_allowed, monkeypatch):
    # The worker holds a variable no submitter may sign with, and one named secret.
    monkeypatch.setenv("WORKER_PRIVATE_KEY", "not-for-signing")
    monkeypatch.setenv("BILLING_HOOK_KEY", "billing-key")
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_SECRETS", "billing=BILLING_HOOK_KEY")
    receiver = Receiver(lambda i: (200, "{}", 0))
    try:
        with pytest.raises(rw.BadArguments):  # the old oracle is not an argument any more
            await app.submit("webhook", url=receiver.url, secret_env="WORKER_PRIVATE_KEY")
        async with running_worker(app):
            billing = await app.submit("webhook", url=receiver.url, body={"n": 1}, secret="billing")
            assert (await billing.result(timeout_s=30))["status"] == 200
            for name in ("WORKER_PRIVATE_KEY", "BILLING_HOOK_KEY", "nope"):
                guessed = await app.submit("webhook", url=receiver.url, secret=name)
                with pytest.raises(rw.RunFailed, match=f"secret '{name}' is not one of the signing"):
                    await guessed.result(timeout_s=30)
            unsigned = await app.submit("webhook", url=receiver.url)  # no default secret here
            assert (await unsigned.result(timeout_s=30))["status"] == 200
    finally:
        receiver.close()
    assert len(receiver.requests) == 2  # the refused ones sent nothing
    assert signed_with("billing-key", receiver.requests[0])
    assert "X-Runwright-Signature" not in receiver.requests[1]["headers"]
    assert await app.store.run_count_by_state(RunCountParams()) == {"succeeded": 2, "failed": 3}


async def test_private_targets_are_the_operators_to_allow(app, monkeypatch):
    receiver = Receiver(lambda i: (200, "{}", 0))
    try:
        with pytest.raises(rw.BadArguments):  # a job cannot allow itself
            await app.submit("webhook", url=receiver.url, allow_private=True)
        async with running_worker(app):
            monkeypatch.setenv("RUNWRIGHT_WEBHOOK_ALLOW", "10.0.0.0/8,hooks.internal")
            elsewhere = await app.submit("webhook", url=receiver.url)
            with pytest.raises(rw.RunFailed, match="operator allows such targets with RUNWRIGHT_WEBHOOK"):
                await elsewhere.result(timeout_s=30)
            monkeypatch.setenv("RUNWRIGHT_WEBHOOK_ALLOW", "127.0.0.0/8")
            allowed = await app.submit("webhook", url=receiver.url)
            assert (await allowed.result(timeout_s=30))["status"] == 200
            monkeypatch.setenv("RUNWRIGHT_WEBHOOK_ALLOW", "not a host!")
            misconfigured = await app.submit("webhook", url=receiver.url)
            with pytest.raises(rw.RunFailed, match="RUNWRIGHT_WEBHOOK_ALLOW must list"):
                await misconfigured.result(timeout_s=30)
    finally:
        receiver.close()
    assert len(receiver.requests) == 1


async def test_an_ipv6_address_embedding_a_private_ipv4_is_refused(app):
    receiver = Receiver(lambda i: (200, "{}", 0))
    try:
        async with running_worker(app):
            for host, embedded in [("64:ff9b::7f00:1", "127.0.0.1"),    # NAT64
                                   ("64:ff9b::a01:203", "10.1.2.3"),
                                   ("2002:a9fe:a9fe::1", "169.254.169.254"),  # 6to4
                                   ("::ffff:127.0.0.1", "127.0.0.1"),   # IPv4-mapped
                                   ("::a01:203", "10.1.2.3")]:          # IPv4-compatible
                run = await app.submit("webhook", url=f"http://[{host}]:{receiver.url.split(':')[2]}")
                with pytest.raises(rw.RunFailed, match=f"which embeds {embedded}, a private"):
                    await run.result(timeout_s=30)
    finally:
        receiver.close()
    assert receiver.requests == []
