"""A real OTLP/HTTP trace receiver on loopback, for tests: what a collector would get.

It speaks the protocol's http/protobuf form (POST /v1/traces, an ExportTraceServiceRequest,
answered with an empty ExportTraceServiceResponse), decodes every span with the
`opentelemetry-proto` package and keeps it, so a test can read back exactly what the
workers exported.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

__all__ = ["OtlpReceiver", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root
    name: str
    attributes: dict[str, Any]
    status_code: int
    start_ns: int
    end_ns: int


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    """`with OtlpReceiver() as receiver:` serves on 127.0.0.1:<free port>; `endpoint` is
    what OTEL_EXPORTER_OTLP_ENDPOINT takes."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._take(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(ReceivedSpan(
                        span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.name,
                        {a.key: _value(a.value) for a in span.attributes}, span.status.code,
                        span.start_time_unix_nano, span.end_time_unix_nano))
        with self._lock:
            self.requests += 1
            self.spans.extend(found)

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def env(self, delay_ms: int = 50) -> dict[str, str]:
        """The standard variables that point a worker's exporter here (http/protobuf),
        exporting batches every `delay_ms` so that a span is out before a SIGKILL."""
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": str(delay_ms),
                "OTEL_SERVICE_NAME": "runwright-test"}

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
