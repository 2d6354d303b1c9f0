"""`runwright mcp MODULE:APP`: the app's runs as an MCP server (integrations/mcp/_server.py),
over stdio (the default: an MCP client starts this command) or streamable HTTP (`--http`).

Over stdio, stdout is the protocol: nothing else is printed there (logs go to stderr).
Imported only by `mcp`, so other commands never load the MCP SDK."""

from __future__ import annotations

import signal
import socket
from typing import Any

import typer

from ..app import App
from ..observe._logs import configure_logging
from ._exits import clear_errors
from ._main import URL, cli, use_url
from ._params import Integer

__all__ = ["mcp"]


@cli.command()
def mcp(
    app_spec: str = typer.Argument(..., metavar="MODULE:APP", help="The app, e.g. jobs:app."),
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP (at /mcp) instead of stdio."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="--http: address to listen on."),
    port: int = typer.Option(8000, metavar="PORT", click_type=Integer(0, 65535),
                             help="--http: port to listen on (0: one the system picks)."),
    token: str | None = typer.Option(None, "--token", envvar="RUNWRIGHT_TOKEN", metavar="TOKEN",
                                     help="stdio: act as this token's tenant (a token of RUNWRIGHT_TOKENS) "
                                          "or the operator's (RUNWRIGHT_OPERATOR_TOKENS); none: the "
                                          "operator. Over --http each request's bearer token decides."),
    url: str | None = URL,
) -> None:
    """Serve the app's runs as MCP tools: submit_run, get_run, follow_run (a long poll),
    list_runs, read_thread, list_questions, answer_question, cancel_run, retry_run, with
    the HTTP API's checks and scoping. Over --http, tokens come from RUNWRIGHT_TOKENS and
    RUNWRIGHT_OPERATOR_TOKENS as for `serve` (on a loopback address with none, a one-off
    operator token is made and printed)."""
    configure_logging()
    with clear_errors():
        use_url(url)
        try:
            import mcp as _sdk  # noqa: F401
        except ImportError:
            from ..errors import ConfigError

            raise ConfigError("runwright mcp needs the MCP SDK: pip install 'runwright[mcp]'") from None
        from ._loader import load_app

        app = load_app(app_spec)
        from ..integrations.mcp import _server as face

        if http:
            from ..server import Auth

            auth = Auth.from_env(host=host)
            server = face.create_mcp_server(app, auth, face.caller_of_http(auth))
        else:
            auth, who = face.caller_of_stdio(token)
            server = face.create_mcp_server(app, auth, lambda _ctx: who)
    if http:
        _serve_http(app, server, auth, host, port)
    else:
        _serve_stdio(app, server)


def _serve_stdio(app: App, server: Any) -> None:
    from mcp.server.stdio import stdio_server

    from ..engine._supervisor import event_loop_runner

    async def go() -> None:
        await app.open()
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await app.close()

    with clear_errors(), event_loop_runner() as runner:
        runner.run(go())


def _serve_http(app: App, server: Any, auth: Any, host: str, port: int) -> None:
    import uvicorn

    from ..engine._supervisor import event_loop_runner
    from ..integrations.mcp._server import require_token
    from ._serving import ONE_OFF_NOTE, bind

    asgi = require_token(server.streamable_http_app(host=host), auth)
    config = uvicorn.Config(asgi, host=host, port=port, log_level="warning", lifespan="on")

    class Announcing(uvicorn.Server):
        def __init__(self, listener: socket.socket) -> None:
            super().__init__(config)
            self.listener = listener

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                bound = self.listener.getsockname()[1]
                print(f"{'listening on':<13} http://{f'[{host}]' if ':' in host else host}:{bound}/mcp",
                      flush=True)
                if auth.one_off is not None:
                    print(f"{'token':<13} {auth.one_off}", flush=True)
                    print(f"{'':<13} {ONE_OFF_NOTE.replace('that link signs', 'that token signs')}",
                          flush=True)

    async def go() -> None:
        await app.open()
        try:
            listener = bind(host, port)
            signal.signal(signal.SIGTERM, lambda _sig, _frame: None)  # a drained server exits 0
            await Announcing(listener).serve(sockets=[listener])
        finally:
            await app.close()

    with clear_errors(), event_loop_runner() as runner:
        runner.run(go())
