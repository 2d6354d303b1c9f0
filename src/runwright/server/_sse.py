"""How this server frames server-sent events: one framing for a run's stream and a
thread's, so a client (an EventSource, the CLI) reads both the same way."""

from __future__ import annotations

from typing import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

__all__ = ["PING_S", "SSE_SEP", "event_stream", "opening"]

# A comment line this often keeps proxies and load balancers from closing a quiet
# stream; a client that lost the stream reconnects after RETRY_MS, sending Last-Event-ID.
PING_S = 15.0
RETRY_MS = 3000
# Lines end with a bare newline, so frames end with a blank line "\n\n" (each event
# given here carries it too: sse-starlette encodes an event with the event's own).
SSE_SEP = "\n"
SEND_TIMEOUT_S = 60.0  # a client that reads nothing for this long is let go


def opening(comment: str) -> ServerSentEvent:
    """A stream's first frame: a comment saying what it follows from where, and the
    reconnect delay, so a client knows it before the first event comes."""
    return ServerSentEvent(comment=comment, retry=RETRY_MS, sep=SSE_SEP)


def event_stream(events: AsyncIterator[ServerSentEvent], ping_s: float) -> EventSourceResponse:
    """The response that sends `events`, pinging every `ping_s` while they are quiet."""
    return EventSourceResponse(events, ping=ping_s, sep=SSE_SEP, send_timeout=SEND_TIMEOUT_S,
                               headers={"Cache-Control": "no-cache"})
