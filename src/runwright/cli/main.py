"""`runwright worker | serve | submit | runs | show | events | follow | cancel | retry | dead |
workers | thread | schedules | status | migrate | demo | verify`.

Exit codes and the one-line errors live in `exits`, output for people and scripts in
`output`; `serve` loads the web stack from `serving` only when it runs.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
from typing import Any, Awaitable, Callable, Coroutine, Mapping, Sequence, TypeVar

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from ..app import App
from ..client.scope import RETRY_REFUSALS
from ..errors import InvalidInput, RunFailed
from ..observe.logs import configure_logging
from ..runs import RunState
from ..schedules import clock_from_env
from . import views
from .exits import BAD_INPUT, FAILED, TABLE, TIMED_OUT, clear_errors, code_for, err, fail
from .output import as_json as as_json_value
from .output import escape, out, print_json
from .output import show as show_out
from .params import (
    AFTER,
    DOCUMENT,
    ID,
    LIMIT,
    SECONDS,
    SECONDS_OR_ZERO,
    STORE_URL,
    TEXT,
    Integer,
    Number,
    UsageError,
)

__all__ = ["cli", "command", "main", "run"]

T = TypeVar("T")
EXIT_CODES = "\b\nExit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in TABLE)
cli = typer.Typer(help="runwright: durable, distributed execution for agent runs and jobs.",
                  epilog=EXIT_CODES, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None)

URL = typer.Option(None, "--url", envvar="RUNWRIGHT_URL", metavar="URL", click_type=STORE_URL,
                   help="Store URL. Defaults to RUNWRIGHT_URL, else sqlite:///./runwright.db.")
JSON_OUT = typer.Option(False, "--json", help="Print JSON for scripts instead of a table.")
RUN_ID = typer.Argument(..., metavar="RUN_ID", click_type=ID, help="The run's id.")
METAVARS = {"int": "INTEGER", "float": "NUMBER", "str": "TEXT"}


def _version(given: bool) -> None:
    if given:
        from importlib.metadata import version

        print(f"runwright {version('runwright')}")
        raise typer.Exit()


@cli.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """runwright: durable, distributed execution for agent runs and jobs."""


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with clear_errors():
        return asyncio.run(make())


def with_app(url: str | None, use: Callable[[App], Awaitable[T]], migrate: bool = False,
             app: App | None = None) -> T:
    """Open the store (of `app`, or a new App on `url`), `use` the App, close. Without
    `migrate` nothing is created: a missing SQLite file is one line (exit 4), and no
    empty database is left behind."""

    async def go() -> T:
        nonlocal app
        app = app or App(url, auto_migrate=migrate)
        try:
            await app.open()
            return await use(app)
        finally:
            await app.close()

    return run_async(go)


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
    from ..engine.supervisor import PoolCannotStart, run_worker, supervise
    from ..engine.worker import WorkerConfig
    from .loader import load_app

    configure_logging()
    _use_url(url)
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
        with_app(url, _opened, app=app)
        try:
            code = supervise(argv_of, processes)
        except PoolCannotStart as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            code = exc.exit_code
        raise typer.Exit(code)
    with clear_errors():
        from ..engine.probes import Probes

        probes = Probes(metrics_host, metrics_port) if metrics_port is not None else None
        from ..engine.worker import WorkerCrashed
        from ..observe.exporting import setup_tracing

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
    url: str | None = URL,
) -> None:
    """Serve the HTTP API (REST, SSE, OpenAPI at /openapi.json, docs at /docs) and the
    dashboard (at /); prints where it listens once it does. Bearer tokens come from
    RUNWRIGHT_TOKENS="token=tenant,..."; RUNWRIGHT_AUTH=off serves without auth (local use)."""
    from .loader import load_app

    configure_logging()
    with clear_errors():
        _use_url(url)
        app = load_app(app_spec)
        from ..server import Auth

        auth = Auth.from_env()
    from .serving import serve_app

    serve_app(app, auth, host, port)


@cli.command()
def submit(
    app_spec: str | None = typer.Argument(None, metavar="MODULE:APP",
                                          help="The app; without it, only built-in job types."),
    task: str | None = typer.Argument(None, metavar="TASK", help="Task name (or give it in --json)."),
    args: str = typer.Option("{}", "--args", "-a", metavar="JSON",
                             help="Keyword arguments as a JSON object."),
    spec: str | None = typer.Option(None, "--json", metavar="JSON", help='A whole submission as JSON, e.g. '
                                    '{"task": "webhook", "args": {"url": "..."}, "key": "k1"}, with '
                                    'keys task, args, key, priority, delay_s, run_at, queue, thread, '
                                    'on_busy, budget (any other is refused); @path reads it from a '
                                    'file. Options given beside it win.'),
    key: str | None = typer.Option(None, metavar="KEY",
                                   help="Idempotency key: the same key is the same run."),
    priority: int | None = typer.Option(None, metavar="N", click_type=Integer(0, 32767),
                                        help="0 critical .. 3 low."),
    delay_s: float | None = typer.Option(None, metavar="SECONDS", click_type=SECONDS_OR_ZERO,
                                         help="Start no sooner than this many seconds."),
    run_at: str | None = typer.Option(None, "--run-at", metavar="WHEN",
                                      help="Start no sooner than this time: ISO 8601 with a zone "
                                           "(2026-12-01T09:00:00Z, ...+02:00) or epoch seconds."),
    timeout_s: float | None = typer.Option(None, "--timeout-s", metavar="SECONDS", click_type=SECONDS,
                                           help="With --wait: stop waiting after this long, exit 6 "
                                                "(the run goes on)."),
    queue: str | None = typer.Option(None, metavar="QUEUE", help="The queue. Defaults to the task's."),
    traceparent: str | None = typer.Option(None, metavar="TRACEPARENT",
                                           help="W3C traceparent: the run's spans continue this "
                                                "trace (default: the run starts its own)."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the run to end and print its result."),
    url: str | None = URL,
) -> None:
    """Submit a run of TASK, or of the job a --json document describes."""
    from .loader import load_app
    from .submitting import gather_submission

    with clear_errors():
        _use_url(url)
        task, kwargs, options = gather_submission(task, args, spec, dict(
            key=key, priority=priority, delay_s=delay_s, run_at=run_at, queue=queue,
            traceparent=traceparent))
        if timeout_s is not None and not (wait and timeout_s > 0):
            raise InvalidInput(f"--timeout-s goes with --wait and is > 0 seconds, got {timeout_s}")
        app = load_app(app_spec) if app_spec else App()

    async def go() -> Any:
        try:
            handle = await app.submit(task, key=options.get("key"), priority=options.get("priority"),
                                      delay_s=options.get("delay_s"), run_at=options.get("run_at"),
                                      queue=options.get("queue"), budget=options.get("budget"),
                                      thread=options.get("thread"),
                                      on_busy=options.get("on_busy", "reject"),
                                      traceparent=options.get("traceparent"), **kwargs)
            verb = "exists" if handle.existed else "submitted"
            out.print(f"run {handle.id} {verb} (key {handle.run.key}, state {handle.state.value})",
                      highlight=False, markup=False)
            if wait:
                await _wait(app, handle, timeout_s)
        finally:
            await app.close()

    run_async(go)


async def _wait(app: App, handle: Any, timeout_s: float | None) -> None:
    """Print the run's result; exit 1 if it did not succeed, 6 if it did not end in time."""
    from .submitting import warn_if_unserved

    await warn_if_unserved(app, handle, lambda line: err.print(f"warning: {line}", highlight=False,
                                                               markup=False))
    try:
        value = await handle.result(timeout_s=timeout_s)
    except TimeoutError:
        raise fail(f"run {handle.id} did not end within {timeout_s:g} s; it goes on "
                   f"(runwright follow {handle.id})", TIMED_OUT) from None
    except RunFailed as exc:
        err.print(f"[bold red]{escape(str(exc))}[/]")
        raise typer.Exit(FAILED) from None
    out.print_json(json.dumps(value))


@cli.command()
def runs(
    state: list[str] | None = typer.Option(None, "--state", "-s", metavar="STATE",
                                           help="Only runs in this state; repeatable."),
    task: str | None = typer.Option(None, "--task", "-t", metavar="TASK", help="Only this task's runs."),
    queue: str | None = typer.Option(None, "--queue", "-q", metavar="QUEUE", help="Only this queue's runs."),
    thread: str | None = typer.Option(None, "--thread", metavar="THREAD", help="Only this thread's runs."),
    limit: int = typer.Option(50, "--limit", "-n", metavar="N", click_type=LIMIT,
                              help="At most this many runs."),
    as_json: bool = JSON_OUT,
    url: str | None = URL,
) -> None:
    """List runs, newest first."""
    with clear_errors():
        states = [_state(s) for s in state or []]
    found = with_app(url, lambda app: app.list_runs(states=states, task=task, queue=queue, thread=thread,
                                                    limit=limit))
    if as_json:
        return print_json(found)
    show_out(views.runs_table(found, full=not out.is_terminal))


@cli.command()
def status(as_json: bool = JSON_OUT, url: str | None = URL) -> None:
    """Queued, running, done and dead runs, workers alive, the oldest due run's wait."""
    from ..observe import metrics

    found = with_app(url, metrics.summary)
    if as_json:
        return print_json(found)
    show_out(views.summary_table(found))


@cli.command()
def dead(limit: int = typer.Option(50, "--limit", "-n", metavar="N", click_type=LIMIT,
                                   help="At most this many runs."),
         as_json: bool = JSON_OUT, url: str | None = URL) -> None:
    """List the dead-letter queue: runs whose attempts ran out (re-queue with `retry`)."""
    found = with_app(url, lambda app: app.dead_letters(limit=limit))
    if as_json:
        return print_json(found)
    show_out(views.runs_table(found, title="dead letters", full=not out.is_terminal))


@cli.command()
def show(run_id: int = RUN_ID, as_json: bool = JSON_OUT, url: str | None = URL) -> None:
    """Show one run in full: its attempts (when, where, how each ended) and, if it failed,
    the traceback its worker recorded."""

    async def go(app: App) -> tuple[Any, Any]:
        return (await app.get(run_id)).run, await app.attempts(run_id)

    run, attempts = with_app(url, go)
    if as_json:
        return print_json({"run": run, "attempts": attempts})
    show_out(views.run_panel(run))
    if attempts:
        show_out(views.attempts_table(attempts, full=not out.is_terminal))
    trace = views.traceback_text(run)
    if trace is not None:
        show_out(trace)


@cli.command()
def events(run_id: int = RUN_ID,
           after: int = typer.Option(0, "--after", metavar="SEQ", click_type=AFTER,
                                     help="Start after this event seq."),
           as_json: bool = typer.Option(False, "--json", help="One JSON object per line, for scripts."),
           url: str | None = URL) -> None:
    """Print a run's event log as it stands (`follow` waits for more)."""

    async def go(app: App) -> list[Any]:
        await app.read_run(run_id)  # an unknown run is RunNotFound, not an empty log
        return [item async for item in app.events(run_id, after=after, follow=False)]

    for item in with_app(url, go):
        _print_event(item, as_json)


@cli.command()
def follow(run_id: int = RUN_ID,
           after: int = typer.Option(0, "--after", metavar="SEQ", click_type=AFTER,
                                     help="Start after this event seq."),
           as_json: bool = typer.Option(False, "--json", help="One JSON object per line, for scripts."),
           url: str | None = URL) -> None:
    """Print a run's events live; exit when the run ends (1 if it did not succeed)."""

    async def go(app: App) -> RunState:
        async for item in app.events(run_id, after=after):
            _print_event(item, as_json)
        return (await app.get(run_id)).state

    state = with_app(url, go)
    raise typer.Exit(0 if state is RunState.SUCCEEDED else FAILED)


def _print_event(item: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"seq": item.seq, "at": item.at, "kind": item.kind, "data": item.data}),
              flush=True)
    else:
        out.print(views.event_line(item), highlight=False, markup=False)


@cli.command()
def cancel(run_id: int = RUN_ID, url: str | None = URL) -> None:
    """Cancel a run: a queued one never starts; a running one stops within a second."""
    run = with_app(url, lambda app: app.cancel(run_id))
    what = "cancel requested (its worker stops it)" if run.state is RunState.RUNNING else run.state.value
    out.print(f"run {run.id}: {what}")


@cli.command()
def retry(
    run_ids: list[int] | None = typer.Argument(None, metavar="RUN_ID", click_type=ID,
                                               help="Runs to re-queue."),
    all_dead: bool = typer.Option(False, "--all-dead", help="Re-queue every dead letter."),
    task: str | None = typer.Option(None, "--task", metavar="TASK",
                                    help="With --all-dead: only this task's."),
    url: str | None = URL,
) -> None:
    """Re-queue dead or failed runs with fresh attempts (completed steps keep their results).
    A run that is not retried is named with why; the exit is then the first one's code
    (a run not in a state to retry: 2; no such run, or a run of a deleted thread: 5)."""

    async def go(app: App) -> tuple[list[Any], dict[int, Exception]]:
        ids = list(run_ids or [])
        if all_dead:
            ids += [run.id for run in await app.dead_letters(task=task, limit=100_000)]
        done: list[Any] = []
        refused: dict[int, Exception] = {}
        for run_id in ids:  # one at a time, as retry_many, keeping why each was refused
            try:
                done.append(await app.retry(run_id))
            except RETRY_REFUSALS as exc:
                refused[run_id] = exc
        return done, refused

    with clear_errors():
        if not run_ids and not all_dead:
            raise InvalidInput("name the runs to retry, or give --all-dead")
    done, refused = with_app(url, go)
    for handle in done:
        out.print(f"run {handle.id}: {handle.state.value}")
    for run_id, reason in refused.items():
        err.print(f"run {run_id}: not retried: {type(reason).__name__}: {reason}", highlight=False,
                  markup=False)
    out.print(f"{len(done)} re-queued, {len(refused)} refused")
    if refused:
        raise typer.Exit(code_for(next(iter(refused.values()))))


@cli.command()
def workers(as_json: bool = JSON_OUT, url: str | None = URL) -> None:
    """List the registered workers: host, pid, app version, queues, tasks, last heartbeat."""

    async def go(app: App) -> tuple[list[Any], float]:
        return await app.list_workers(), app.now()

    found, now = with_app(url, go)
    if as_json:
        return print_json(found)
    show_out(views.workers_table(found, now))


@cli.command()
def schedules(
    action: str = typer.Argument("list", metavar="ACTION", help="list, create, pause, resume or delete."),
    name: str | None = typer.Argument(None, metavar="NAME", help="The schedule (for all but list)."),
    app_spec: str | None = typer.Option(None, "--app", metavar="MODULE:APP",
                                        help="create: the app, to check the task."),
    task: str | None = typer.Option(None, "--task", metavar="TASK", help="create: the task to run."),
    cron: str | None = typer.Option(None, "--cron", metavar="CRON",
                                    help="create: croniter syntax, seconds last."),
    args: str = typer.Option("{}", "--args", metavar="JSON", help="create: the task's arguments as JSON."),
    tz: str = typer.Option("UTC", "--tz", metavar="ZONE", help="create: an IANA time zone."),
    misfire: str = typer.Option("skip", "--misfire", metavar="POLICY", help="create: skip or catch_up."),
    as_json: bool = typer.Option(False, "--json", help="list, create: print JSON for scripts."),
    url: str | None = URL,
) -> None:
    """List schedules with their next fire times; create, pause, resume or delete one."""
    if action == "list":
        found = with_app(url, lambda app: app.list_schedules())
        if as_json:
            return print_json(found)
        show_out(views.schedules_table(found))
        return None
    operations = {"pause": App.pause_schedule, "resume": App.resume_schedule,
                  "delete": App.delete_schedule}
    with clear_errors():
        if action not in (*operations, "create") or not name:
            raise InvalidInput(f"use `runwright schedules list` or `runwright schedules "
                               f"create|pause|resume|delete NAME` (got {action!r})")
        if action == "create":
            saved = _create_schedule(name, app_spec, task, cron, args, tz, misfire, url)
            if as_json:
                return print_json(saved)
            show_out(views.schedules_table([saved]))
            return None
    with_app(url, lambda app: operations[action](app, name))
    out.print(f"schedule {name}: {action}d")
    return None


def _create_schedule(name: str, app_spec: str | None, task: str | None, cron: str | None,
                     args: str, tz: str, misfire: str, url: str | None) -> Any:
    from .loader import load_app
    from .submitting import json_object, parse_json

    if not task or not cron:
        raise InvalidInput("create needs --task and --cron")
    _use_url(url)
    app = load_app(app_spec) if app_spec else App()
    spec = app.schedule_spec(name, cron=cron, task=task, args=json_object(parse_json(args, "--args"),
                             "--args"), tz=tz, misfire=misfire, catch_up_limit=10, queue=None,
                             priority=None)

    async def save() -> Any:
        try:
            return await app.save_schedule(spec)
        finally:
            await app.close()

    return run_async(save)


@cli.command()
def migrate(url: str | None = URL) -> None:
    """Create or upgrade the schema (numbered migrations; safe to run concurrently)."""

    async def go() -> tuple[list[int], int]:
        app = App(url, auto_migrate=False)
        try:
            return await app.migrate()
        finally:
            await app.close()

    applied, version = run_async(go)
    out.print(f"schema at version {version}" + (f"; applied {applied}" if applied else "; nothing to do"))


@cli.command()
def demo(
    runs_count: int = typer.Option(300, "--runs", metavar="N", click_type=Integer(1, 1_000_000),
                                   help="Runs to submit."),
    workers: int = typer.Option(3, "--workers", metavar="N", click_type=Integer(1, 64),
                                help="Worker processes."),
    url: str | None = typer.Option(None, "--url", metavar="URL", click_type=STORE_URL,
                                   help="Store URL. Defaults to a fresh ./runwright-demo.db."),
) -> None:
    """Show the core guarantee: worker processes, a SIGKILL midway, every run done once."""
    from .demo import run_demo

    with clear_errors():
        ok = run_demo(runs_count, workers, url)
    raise typer.Exit(0 if ok else 1)


@cli.command()
def verify(
    url: str | None = URL,
    workers: int = typer.Option(5, "--workers", metavar="N", click_type=Integer(1, 1024),
                                help="Worker processes verify starts."),
    runs_count: int = typer.Option(10000, "--runs", metavar="N", click_type=Integer(1, 100_000_000),
                                   help="Runs of its workload."),
    steps: int = typer.Option(3, "--steps", metavar="N", click_type=Integer(1, 10_000),
                              help="Journaled steps per run."),
    kill_every: str = typer.Option("2s", "--kill-every", metavar="DURATION",
                                   help="SIGKILL a random worker (restarted) this often; 0: never."),
    stall_every: str = typer.Option("10s", "--stall-every", metavar="DURATION",
                                    help="SIGSTOP a worker past its lease, then SIGCONT; 0: never."),
    blip_every: str = typer.Option("5s", "--blip-every", metavar="DURATION",
                                   help="Drop the workers' database connections (SQLite: kill a "
                                        "writer mid-transaction); 0: never."),
    seed: int | None = typer.Option(None, "--seed", metavar="N", click_type=Integer(0, 2**63 - 1),
                                    help="The same seed makes the same fault schedule."),
    lease_s: float = typer.Option(2.0, "--lease-s", metavar="SECONDS", click_type=Number(1, 3600),
                                  help="The workers' lease: a stalled one loses its runs after it."),
    timeout_s: float = typer.Option(600.0, "--timeout-s", metavar="SECONDS", click_type=SECONDS,
                                    help="Give up draining after this (runs not ended are lost)."),
    fleet: bool = typer.Option(
        False, "--fleet",
        help="Use the running fleet instead of its own workers: every ready `runwright worker` of "
             "the store serves a queue of this session's (runwright.verify.ID) while verify "
             "runs; faults reach, over the fleet bus, only workers started with "
             "--allow-verify-faults (else they are reported skipped). --workers and --lease-s "
             "are the fleet's. Exit 8 when no worker takes the session."),
    app_version: str = typer.Option(
        "0.0.0", "--app-version", metavar="X.Y.Z",
        help="With --fleet: the fleet's app version (its major names the fleet and the runs "
             "its workers take)."),
    json_out: bool = JSON_OUT,
) -> None:
    """Prove the deployment's guarantees: verify's own workers run a ledgered workload in a
    schema (namespace, file) of its own while faults hit them; exit 0 only if nothing was
    lost, repeated or let through. It removes all it made, even when interrupted. With
    --fleet, the running fleet's workers run it, on a queue of its own."""
    from .verifying import verify as run

    with clear_errors():
        run(url, workers, runs_count, steps, kill_every, stall_every, blip_every,
            seed, lease_s, timeout_s, json_out, fleet, app_version)


thread_cli = typer.Typer(help="Threads: list them; show one's runs and history, cancel its runs, follow.",
                         no_args_is_help=True)
cli.add_typer(thread_cli, name="thread")
TENANT = typer.Option(None, "--tenant", help="The thread's tenant (threads are named per tenant).")
THREAD = typer.Argument(..., metavar="THREAD", help="The thread's name.")


def _scope(app: App, tenant: str | None) -> Any:
    return app if tenant is None else app.tenant(tenant)


@thread_cli.command("list")
def thread_list(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's threads (default: "
                                                              "every tenant's)."),
    limit: int = typer.Option(50, "--limit", "-n", metavar="N", click_type=LIMIT,
                              help="At most this many threads."),
    deleted: bool = typer.Option(False, "--deleted", help="List deleted threads too (marked)."),
    as_json: bool = JSON_OUT,
    url: str | None = URL,
) -> None:
    """List threads, newest first: each one's tenant, runs, open runs and newest run."""
    found = with_app(url, lambda app: _scope(app, tenant).list_threads(limit=limit, include_deleted=deleted))
    if as_json:
        return print_json([{**as_json_value(t), "deleted": t.deleted, "busy": t.busy} for t in found])
    show_out(views.threads_table(found, full=not out.is_terminal))


@thread_cli.command("show")
def thread_show(name: str = THREAD, tenant: str | None = TENANT, as_json: bool = JSON_OUT,
                url: str | None = URL) -> None:
    """Show a thread: its runs, newest first, and its message history, in order."""

    async def go(app: App) -> tuple[list[Any], list[Any]]:
        scope = _scope(app, tenant)
        return await scope.list_runs(thread=name, limit=1000), await scope.thread_history(name)

    found, messages = with_app(url, go)
    if as_json:
        return print_json({"thread": name, "runs": found, "messages": messages})
    show_out(views.runs_table(found, title=f"runs of thread {name}", full=not out.is_terminal))
    for line in views.messages_lines(messages):
        out.print(line, highlight=False, markup=False)


@thread_cli.command("cancel")
def thread_cancel(name: str = THREAD, tenant: str | None = TENANT,
                  url: str | None = URL) -> None:
    """Cancel every open run of a thread; the thread and its history stay."""
    runs = with_app(url, lambda app: _scope(app, tenant).cancel_thread(name))
    for run in runs:
        what = "cancel requested (its worker stops it)" if run.state is RunState.RUNNING else run.state.value
        out.print(f"run {run.id}: {what}")
    out.print(f"thread {name!r}: {len(runs)} open run(s) cancelled")


@thread_cli.command("follow")
def thread_follow(name: str = THREAD, tenant: str | None = TENANT,
                  after: int = typer.Option(0, "--after", click_type=AFTER,
                                            help="Start after this thread seq (tseq)."),
                  url: str | None = URL) -> None:
    """Print a thread's events live, run after run (`tseq run:seq time kind data`), until
    interrupted. Resume with --after at the last tseq printed."""

    async def go(app: App) -> None:
        async for item in _scope(app, tenant).follow_thread(name, after=after):
            out.print(f"{item.tseq:>5} {item.run_id}:{views.event_line(item).lstrip()}", highlight=False)

    with_app(url, go)


def _use_url(url: str | None) -> None:
    """--url wins over RUNWRIGHT_URL: set before the app module builds its App."""
    if url:
        os.environ["RUNWRIGHT_URL"] = url


async def _opened(_app: App) -> None:
    """Nothing more than opening the App (`with_app` opens and closes it)."""


def _stop_before_start(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _state(text: str) -> RunState:
    try:
        return RunState(text)
    except ValueError:
        raise InvalidInput(f"unknown state {text!r}; one of {', '.join(s.value for s in RunState)}") from None


@functools.cache
def command() -> TyperGroup:
    """The command behind `runwright`, its help without Typer's `<int>`-style hints: a
    plain metavar (INTEGER, TEXT, ...) on every option that names none, and an argument
    shown by its metavar alone (Typer adds its Python type: `MODULE:APP <str>`). Made
    once per process."""
    group = typer.main.get_command(cli)
    assert isinstance(group, TyperGroup)
    for sub in [group, *group.commands.values()]:
        for param in sub.params:
            if isinstance(param, TyperOption) and not param.is_flag and param.metavar is None:
                name = _type_name(param)
                param.metavar = METAVARS.get(name, name.upper())
            elif isinstance(param, TyperArgument):
                setattr(param, "display_type_rich", _no_type)  # noqa: B010 (mypy: a method)
    _check_text(group)
    return group


def _check_text(command: Any) -> None:
    """Every text an option or argument of `command` and its subcommands takes is read as
    `params.Text` (JSON as a `DOCUMENT`): no command gets an empty, over-long or NUL
    text, or bytes that are not UTF-8, whoever declared the option."""
    for param in command.params:
        if type(param.type).__name__ == "StringParamType":  # click's STRING (typer's copy, or click's)
            param.type = DOCUMENT if param.metavar in ("JSON", "[JSON]") else TEXT
    for sub in getattr(command, "commands", {}).values():
        _check_text(sub)


def _type_name(param: TyperOption) -> str:
    """`int`, `float`, `str`, `int range`...: `bare_type()` since Typer 0.29, the type's name before."""
    bare = getattr(param, "bare_type", None)
    return str(bare() if bare is not None else param.type.name)


def _no_type(ctx: object) -> None:
    return None


def run(argv: Sequence[str] | None = None) -> int:
    """`runwright ARGV` (default: this process's arguments): its exit code. A usage error
    (an unknown option, a value of the wrong kind or range) is one line on stderr and
    exit 2, as every bad input; `--help` and a bare group print their help."""
    group = command()
    try:
        code = group.main(args=argv, prog_name="runwright", standalone_mode=False)
    except UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `runwright`, `runwright thread`
            exc.show()  # type: ignore[attr-defined]
            return BAD_INPUT
        return _usage_error(exc)
    except typer.Abort:
        err.print("Aborted!", highlight=False, markup=False)
        return FAILED
    return code if isinstance(code, int) else 0


def _usage_error(exc: Any) -> int:
    """One line: what was wrong, and where the command's help is."""
    where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
    err.print(f"[bold red]error:[/] {escape(exc.format_message())}{escape(where)}", highlight=False)
    return BAD_INPUT


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
