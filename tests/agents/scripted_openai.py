"""A real HTTP server on loopback that speaks the OpenAI chat-completions protocol, with
replies scripted by the test: tool calls, parallel tool calls, streaming (SSE), a stream
cut mid-way (the connection dropped after part of the content), 429 with Retry-After, 5xx,
4xx, slow replies. It records every request it receives.

A script is a function of (request body, index of this request) to a Reply, so that any
worker process, after any crash, gets the reply that fits the conversation so far.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

__all__ = ["Reply", "ScriptedOpenAI", "call", "last_role", "tool_results"]


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments"}
    status: int = 200
    error: str = "scripted error"
    retry_after: str | None = None
    delay_s: float = 0.0
    usage: tuple[int, int] = (10, 5)
    # Streaming only: send this many characters of the content, then drop the connection
    # (no last chunk, no [DONE]), as a provider or a proxy does when it fails mid-reply.
    cut_after: int | None = None
    chunk_delay_s: float = 0.0  # between streamed chunks, so that a reply spans time


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def last_role(body: dict[str, Any]) -> str:
    return body["messages"][-1]["role"]


def tool_results(body: dict[str, Any]) -> dict[str, str]:
    """tool_call_id -> content of every tool message in the request."""
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


Script = Callable[[dict[str, Any], int], Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog: socketserver's default of 5 resets connections when many
    # clients (worker processes with many runs in flight) connect at once.
    request_queue_size = 128


class ScriptedOpenAI:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.received_at: list[float] = []  # time.monotonic() of each request, in order
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm the body waits
            # for the client's delayed ACK of the headers, ~40 ms per reply on a kept-alive
            # connection. TCP_NODELAY makes an instant reply instant.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(body)
                    server.received_at.append(time.monotonic())
                server._answer(self, body, server.script(body, index))

        self._http = _Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply) -> None:
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200:
            payload = json.dumps({"error": {"message": reply.error, "type": "scripted",
                                            "code": str(reply.status)}}).encode()
            handler.send_response(reply.status)
            if reply.retry_after is not None:
                handler.send_header("Retry-After", reply.retry_after)
            _send(handler, payload, "application/json")
            return
        if body.get("stream"):
            _stream(handler, body, reply)
            return
        _send_status(handler, 200)
        _send(handler, json.dumps(_completion(body, reply)).encode(), "application/json")


def _message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                                 for c in reply.tool_calls]
    return message


def _usage(reply: Reply) -> dict[str, int]:
    prompt, completion = reply.usage
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": _message(reply),
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": _usage(reply)}


def _stream(handler: BaseHTTPRequestHandler, body: dict[str, Any], reply: Reply) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()

    def chunk(delta: dict[str, Any], usage: dict[str, int] | None = None, choices: bool = True) -> None:
        data = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}] if choices else [],
                "usage": usage}
        _write_chunk(handler, f"data: {json.dumps(data)}\n\n".encode())

    chunk({"role": "assistant", "content": ""})
    content = reply.content or ""
    for start in range(0, len(content), 4):
        if reply.cut_after is not None and start >= reply.cut_after:
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)  # mid-body: the client sees a cut
            return
        chunk({"content": content[start:start + 4]})
        if reply.chunk_delay_s:
            time.sleep(reply.chunk_delay_s)
    for index, c in enumerate(reply.tool_calls):
        chunk({"tool_calls": [{"index": index, "id": c["id"], "type": "function",
                               "function": {"name": c["name"], "arguments": ""}}]})
        chunk({"tool_calls": [{"index": index, "function": {"arguments": json.dumps(c["arguments"])}}]})
    chunk({}, usage=_usage(reply), choices=False)
    _write_chunk(handler, b"data: [DONE]\n\n")
    _write_chunk(handler, b"")


def _write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _send_status(handler: BaseHTTPRequestHandler, status: int) -> None:
    handler.send_response(status)


def _send(handler: BaseHTTPRequestHandler, payload: bytes, content_type: str) -> None:
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
