"""`runwright serve`: open the store, bind the address, then say where it listens.

The socket is bound here, not by uvicorn: a port in use is then one line and its own exit
code (uvicorn would log its own error and exit 1), and `--port 0` can name the port the
system chose. Imported only by `serve`, so other commands never load the web stack.
"""

from __future__ import annotations

import errno
import signal
import socket
from typing import Any

import uvicorn

from ..app import App
from ..engine._supervisor import event_loop_runner
from ..server import Auth, create_server
from ..server._factory import DRAIN_S
from ._exits import ADDRESS_IN_USE, BAD_INPUT, clear_errors, fail

__all__ = ["serve_app"]


def serve_app(app: App, auth: Auth, host: str, port: int) -> None:
    """Serve `app` over HTTP on host:port until SIGINT/SIGTERM."""
    with clear_errors():  # a task whose hints cannot be checked: one line, exit 2
        api = create_server(app, auth)
    config = uvicorn.Config(api, host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=int(DRAIN_S))

    async def go() -> None:
        # The store is opened first, in the server's loop: one that cannot be reached is
        # one line and exit 3, as for every command, not a traceback from the lifespan.
        await app.open()
        try:
            listener = bind(host, port)
            server = _Server(config, listener, app, auth.one_off)
            # uvicorn raises a caught signal again once it stopped, under the handler it
            # found: for SIGTERM let that be none, so a drained server exits 0, as a worker.
            signal.signal(signal.SIGTERM, lambda _sig, _frame: None)
            await server.serve(sockets=[listener])
        finally:
            await app.close()

    with clear_errors(), event_loop_runner() as runner:
        runner.run(go())


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (the one line and exit 7 if that cannot be)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror}", BAD_INPUT) from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as exc:
        listener.close()
        hint = "choose another with --port" + (", or stop what listens there"
                                               if exc.errno == errno.EADDRINUSE else "")
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror} ({hint})", ADDRESS_IN_USE) from None
    listener.set_inheritable(True)
    return listener


def urls(host: str, listener: socket.socket, one_off: str | None = None) -> list[tuple[str, str]]:
    """What an operator opens, with the port actually bound (it differs for --port 0). With
    a one-off token, the dashboard's is a sign-in link: the token in the URL's fragment,
    which a browser never sends to a server (no access log holds it), read by the page."""
    port = listener.getsockname()[1]
    base = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    dashboard = f"{base}/" + (f"#token={one_off}" if one_off is not None else "")
    return [("listening on", base), ("dashboard", dashboard), ("API docs", f"{base}/docs"),
            ("OpenAPI", f"{base}/openapi.json")]


# Printed under that link when no token was configured.
ONE_OFF_NOTE = ("(that link signs in as the operator, who sees every run, with a one-off token of this "
                "process; for fixed tokens set RUNWRIGHT_OPERATOR_TOKENS=token[,...] and "
                "RUNWRIGHT_TOKENS=token=tenant[,...])")


class _Server(uvicorn.Server):
    """Prints where it listens once it accepts connections, on stdout (flushed: a script
    reading the pipe learns the URL at once). In the fleet, it reads `recycling` from its
    first SIGTERM/SIGINT (not only once its last connection closed), and a `recycle` op
    stops it as a signal would: it drains, and the process exits 0."""

    def __init__(self, config: uvicorn.Config, listener: socket.socket, app: App,
                 one_off: str | None = None) -> None:
        super().__init__(config)
        self._listener = listener
        self._app = app
        self._one_off = one_off

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            for what, url in urls(self.config.host, self._listener, self._one_off):
                print(f"{what:<13} {url}", flush=True)
                if what == "dashboard" and self._one_off is not None:
                    print(f"{'':<13} {ONE_OFF_NOTE}", flush=True)
            if self._app.fleet.member is not None:  # joined in the lifespan's startup
                self._app.fleet.member.on_recycle = self._recycle

    def _recycle(self) -> None:
        self.should_exit = True  # what uvicorn's signal handler sets

    async def shutdown(self, sockets: Any = None) -> None:
        if self._app.fleet.member is not None:
            await self._app.fleet.member.recycling(DRAIN_S)
        await super().shutdown(sockets)
