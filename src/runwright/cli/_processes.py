"""`runwright worker | serve`: the long-running processes, a worker (or a pool of
them) and the HTTP server; each loads only what it runs."""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Any, Mapping

import typer

from ..core._payloads import holds_keys
from ..core._schedules import clock_from_env
from ..observe._logs import configure_logging
from ._exits import BAD_INPUT, clear_errors, err, fail
from ._main import URL, cli, opened, use_url, with_app
from ._params import (
    LIMIT,
    SECONDS,
    SECONDS_OR_ZERO,
    Integer,
)

__all__ = ["serve", "worker"]


# The worker command's options that are the command line's, not the worker's settings.
CLI_ONLY = frozenset({"app_spec", "processes", "metrics_port", "metrics_host", "allow_verify_faults", "url"})


def _as_options(ctx: typer.Context, settings: Mapping[str, Any]) -> list[str]:
    """The options of `ctx`'s command that give these settings (unset ones left out)."""
    flags = {param.name: max(param.opts, key=len) for param in ctx.command.params}
    return [part for name, value in settings.items() if value is not None
            for part in (flags[name], str(value))]


@cli.command()
def worker(
    ctx: typer.Context,
    app_spec: str = typer.Argument(..., metavar="MODULE:APP", help="The app, e.g. jobs:app."),
    concurrency: int = typer.Option(10, "--concurrency", "-c", click_type=Integer(1, 100_000),
                                    help="Runs at once per process."),
    processes: int = typer.Option(1, "--processes", "-p", click_type=Integer(1, 1024),
                                  help="Worker processes to start."),
    queues: str = typer.Option("default", "--queues", "-q", help="Comma-separated queues."),
    lease_s: float = typer.Option(30.0, click_type=SECONDS,
                                  help="A stalled worker loses its runs after this."),
    drain_grace_s: float = typer.Option(10.0, click_type=SECONDS_OR_ZERO,
                                        help="On SIGTERM: time given to running runs."),
    metrics_port: int | None = typer.Option(
        None, click_type=Integer(1, 65535),
        help="Serve this process's /metrics (Prometheus), /healthz and /readyz "
             "on this port; with -p N, worker process k serves on port+k-1."),
    metrics_host: str = typer.Option("127.0.0.1", help="The address --metrics-port listens on "
                                     "(0.0.0.0: every interface)."),
    retain_max_age_s: float | None = typer.Option(
        None, click_type=SECONDS,
        help="Remove ended runs older than this, with their journal and log (one worker "
             "at a time sweeps). Unset: keep everything."),
    retain_max_events: int | None = typer.Option(
        None, click_type=LIMIT,
        help="Keep a run's last this many events; older ones go, behind one 'trimmed' "
             "event naming the first seq kept. Unset: keep every event."),
    retain_thread_max_runs: int | None = typer.Option(
        None, click_type=LIMIT, help="A thread keeps its newest this many runs; its older ended runs go (its "
                   "history stays). Unset: keep them."),
    retain_tombstone_age_s: float | None = typer.Option(
        None, click_type=SECONDS,
        help="Remove the tombstones of threads deleted longer ago than this; their names "
             "may then name new threads (a reader of the old one is still told it was "
             "deleted). Unset: a deleted name stays taken."),
    retain_thread_max_messages: int | None = typer.Option(
        None, click_type=LIMIT,
        help="A thread's history keeps its newest this many messages (a run still open "
             "keeps all of its own). Unset: keep every message."),
    sweep_interval_s: float = typer.Option(60.0, click_type=SECONDS,
                                           help="How often retention looks for runs to remove."),
    unrunnable_after_s: float = typer.Option(
        3600.0, click_type=SECONDS,
        help="Close failed (Unrunnable) a run due this long that no live worker can run: "
             "none registers its task for the major of the app version that submitted it, "
             "or serves its queue."),
    allow_verify_faults: bool = typer.Option(
        False, "--allow-verify-faults",
        help="Obey the faults of a `runwright verify --fleet` session this worker serves: die "
             "(SIGKILL itself; its supervisor must start it again), stall its event loop past "
             "its lease, drop its database sessions. Off: it runs verify's workload, no fault "
             "(also RUNWRIGHT_VERIFY_FAULTS=1)."),
    url: str | None = URL,
) -> None:
    """Execute runs: claim due runs of the app's tasks, run them, record how they end."""
    # Until the worker's own handlers are in place (after imports and connecting), a
    # SIGTERM simply ends the process cleanly: nothing has been claimed yet.
    signal.signal(signal.SIGTERM, _stop_before_start)
    from ..engine._supervisor import PoolCannotStart, run_worker, supervise
    from ..engine._worker import WorkerConfig
    from ._loader import load_app

    configure_logging()
    use_url(url)
    if allow_verify_faults:  # read when the App is made; the children of -p inherit it
        os.environ["RUNWRIGHT_VERIFY_FAULTS"] = "1"
    # Each setting is spelled once, as its option above: the options that are not the
    # command line's own are WorkerConfig's fields of the same names, and a child of -p
    # gets each of them back as the option it came from.
    settings = {name: value for name, value in ctx.params.items() if name not in CLI_ONLY}
    with clear_errors():
        app = load_app(app_spec)
        options: dict[str, Any] = {**settings, "queues": queues.split(","), "schedule_clock": clock_from_env(
            os.environ.get("RUNWRIGHT_SCHEDULE_CLOCK"))}
        WorkerConfig(**options)  # a bad setting is refused now, before anything starts
    if processes > 1:
        argv = ["worker", app_spec, "-p", "1", *_as_options(ctx, settings)]

        def argv_of(slot: int) -> list[str]:
            # One port per process: each keeps its own counters and its own readiness.
            if metrics_port is None:
                return argv
            return [*argv, "--metrics-host", metrics_host, "--metrics-port", str(metrics_port + slot - 1)]

        if metrics_port is not None and metrics_port + processes - 1 > 65535:
            err.print(f"[bold red]error:[/] ConfigError: --metrics-port {metrics_port} with "
                      f"--processes {processes} needs ports up to {metrics_port + processes - 1}")
            raise typer.Exit(2)
        # What would stop every child at its start (the module, a setting, the store out
        # of reach, its schema) stops the pool here, said once, before any child starts.
        with_app(url, opened, app=app)
        try:
            code = supervise(argv_of, processes)
        except PoolCannotStart as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            code = exc.exit_code
        raise typer.Exit(code)
    with clear_errors():
        from ..engine._probes import Probes

        probes = Probes(metrics_host, metrics_port) if metrics_port is not None else None
        from ..engine._worker import WorkerCrashed
        from ..observe._exporting import setup_tracing

        tracing = setup_tracing()  # only if OTEL_* ask for it and runwright[otel] is installed
        try:
            run_worker(lambda: app.worker(**options), app.close,
                       on_started=probes.attach if probes is not None else lambda _worker: None)
        except WorkerCrashed as exc:
            err.print(f"[bold red]worker crashed:[/] {exc}")
            raise typer.Exit(1) from None
        finally:
            if tracing is not None:
                tracing.shutdown()  # exports the spans still batched


@cli.command()
def serve(
    app_spec: str = typer.Argument(..., metavar="MODULE:APP", help="The app, e.g. jobs:app."),
    host: str = typer.Option("127.0.0.1", metavar="HOST", help="Address to listen on."),
    port: int = typer.Option(8000, metavar="PORT", click_type=Integer(0, 65535),
                             help="Port to listen on (0: one the system picks)."),
    operator_decode: bool = typer.Option(
        False, "--operator-decode",
        help="Let the operator read tenants' encrypted payloads plain when a request asks "
             "(?decode=1, the dashboard's decode switch), each such read logged; off, they "
             "show sealed to the operator. Needs the payload keys."),
    url: str | None = URL,
) -> None:
    """Serve the HTTP API (REST, SSE, OpenAPI at /openapi.json, docs at /docs) and the
    dashboard (at /); prints where it listens once it does. Bearer tokens come from
    RUNWRIGHT_OPERATOR_TOKENS="token,..." and RUNWRIGHT_TOKENS="token=tenant,..."; with
    neither, a server on a loopback address makes a one-off operator token and prints a
    sign-in link with it (anywhere else it refuses); RUNWRIGHT_AUTH=off serves without
    auth (local use)."""
    from ._loader import load_app

    configure_logging()
    with clear_errors():
        use_url(url)
        app = load_app(app_spec)
        from ..server import Auth

        auth = Auth.from_env(host=host)
        if operator_decode:
            if not holds_keys():  # the app's Codecs or RUNWRIGHT_PAYLOAD_KEYS put them there
                raise fail("--operator-decode needs the payload keys (the app's Codecs(keys=...) or "
                           "RUNWRIGHT_PAYLOAD_KEYS): this process has none to decode with", BAD_INPUT)
            auth = dataclasses.replace(auth, operator_decode=True)
    from ._serving import serve_app

    serve_app(app, auth, host, port)


def _stop_before_start(_signum: int, _frame: object) -> None:
    raise SystemExit(0)
