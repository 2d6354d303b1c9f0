"""What a worker process serves on its `--metrics-port`: /metrics, /healthz and /readyz.

A small HTTP server in a thread of its own, so that it answers even while the worker's
event loop is busy, and can therefore tell a stuck loop from a live one:

    /metrics   this process's Prometheus metrics
    /healthz   200 while the process lives (liveness: restart it when this fails)
    /readyz    200 when the worker has started, is not stopping, its side tasks (claimer,
               completer, lease keeper, ...) are alive and its store answers, as checked
               by a coroutine run on the worker's own loop: a loop that does not answer
               within READY_TIMEOUT_S is not ready either. 503 with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import ConfigError

if TYPE_CHECKING:
    from ._worker import Worker

__all__ = ["READY_TIMEOUT_S", "Probes"]

READY_TIMEOUT_S = 5.0  # the store check and the loop's answer, together


class Probes:
    """Serves the probes of the worker given to `attach` (not ready until then)."""

    def __init__(self, host: str, port: int) -> None:
        self._worker: Worker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        probes = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, generate_latest(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._reply(200, json.dumps({"status": "ok"}).encode())
                elif path == "/readyz":
                    ready, reason = probes.readiness()
                    body = {"status": "ready"} if ready else {"status": "not ready", "reason": reason}
                    self._reply(200 if ready else 503, json.dumps(body).encode())
                else:
                    self._reply(404, json.dumps({"detail": "not found"}).encode())

            def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every few seconds is no news

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f"--metrics-host {host} --metrics-port {port}: cannot listen: {exc}") from None
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="runwright-probes", daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def attach(self, worker: Worker) -> None:
        """Called in the worker's loop once it has started."""
        self._worker, self._loop = worker, asyncio.get_running_loop()

    def readiness(self) -> tuple[bool, str]:
        worker, loop = self._worker, self._loop
        if worker is None or loop is None:
            return False, "the worker has not started"
        if loop.is_closed():
            return False, "the worker has stopped"
        try:
            future = asyncio.run_coroutine_threadsafe(worker.check_ready(READY_TIMEOUT_S), loop)
            future.result(READY_TIMEOUT_S + 1)
        except (TimeoutError, concurrent.futures.TimeoutError):
            return False, f"no answer within {READY_TIMEOUT_S:.0f} s (the event loop or the store)"
        except Exception as exc:  # any failure means "not ready", and says why
            return False, f"{type(exc).__name__}: {exc}"
        return True, ""

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
