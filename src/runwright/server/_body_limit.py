"""A limit on request bodies, enforced while they stream in.

A declared Content-Length over the limit is refused before any of the body is read. A
chunked body (no Content-Length) is counted as it arrives and refused the moment it
passes the limit: the rest is never kept, so a 64 MiB upload costs at most the limit in
memory. A body within the limit reaches
the route whole, as one message, so no route ever sees a body that was cut short.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._problems import problem

__all__ = ["BodyLimit"]


class BodyLimit:
    """ASGI middleware: refuse request bodies over `max_bytes` with a 413 problem."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        first = None if _declared_length(scope) > self.max_bytes else await self._read(receive)
        if first is None:
            # The server drops what the client still sends of this body, unread and unkept
            # (closing at once instead would reset the connection under the client before
            # it read this answer).
            await problem(413, "Payload too large",
                          f"request bodies are limited to {self.max_bytes} bytes")(scope, receive, send)
            return
        await self.app(scope, _replay(first, receive), send)

    async def _read(self, receive: Receive) -> Message | None:
        """The whole body as one message (or the disconnect that cut it short); None as
        soon as it is over the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message  # the client went away: the route learns it as it would have
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}


def _replay(first: Message, receive: Receive) -> Receive:
    """A receive that gives `first`, then what the client sends next (a disconnect)."""
    pending = [first]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the server refuses a malformed one before we see it
    return 0
