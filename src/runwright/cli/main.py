"""`runwright worker | submit | runs | show | cancel | retry | dead | migrate | demo`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Coroutine, Iterator, TypeVar

import typer
from rich.console import Console

from ..app import App
from ..errors import (
    ConfigError,
    InvalidInput,
    RunEnded,
    RunFailed,
    RunNotFound,
    SchemaError,
    StoreError,
    StoreUnreachable,
)
from ..logs import configure_logging
from ..runs import RunState
from ..schedules import clock_from_env
from . import views

__all__ = ["cli", "main"]

T = TypeVar("T")
cli = typer.Typer(help="runwright: durable, distributed execution for agent runs and jobs.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
err = Console(stderr=True, soft_wrap=True)  # one error, one line, even in a pipe
out = Console()

URL = typer.Option(None, "--url", envvar="RUNWRIGHT_URL",
                   help="Store URL. Defaults to RUNWRIGHT_URL, else sqlite:///./runwright.db.")

# Exit codes: 1 a run failed or a worker crashed; 2 bad input or setting; 3 store unreachable;
# 4 schema mismatch.
EXIT_FOR = [(StoreUnreachable, 3), (SchemaError, 4), (StoreError, 3), (InvalidInput, 2),
            (ConfigError, 2), (RunNotFound, 2), (RunEnded, 2)]


@contextmanager
def clear_errors() -> Iterator[None]:
    """Turn runwright's errors into one clear line and a non-zero exit, not a traceback."""
    try:
        yield
    except tuple(kind for kind, _ in EXIT_FOR) as exc:
        code = next(code for kind, code in EXIT_FOR if isinstance(exc, kind))
        err.print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
        raise typer.Exit(code) from None


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with clear_errors():
        return asyncio.run(make())


def with_app(url: str | None, use: Callable[[App], Awaitable[T]], migrate: bool = False,
             app: App | None = None) -> T:
    async def go() -> T:
        nonlocal app
        app = app or App(url, auto_migrate=migrate)
        try:
            await app.open()
            return await use(app)
        finally:
            await app.close()

    return run_async(go)


@cli.command()
def worker(
    app_spec: str = typer.Argument(..., metavar="MODULE:APP", help="The app, e.g. jobs:app."),
    concurrency: int = typer.Option(10, "--concurrency", "-c", help="Runs at once per process."),
    processes: int = typer.Option(1, "--processes", "-p", help="Worker processes to start."),
    queues: str = typer.Option("default", "--queues", "-q", help="Comma-separated queues."),
    lease_s: float = typer.Option(30.0, help="A stalled worker loses its runs after this."),
    drain_grace_s: float = typer.Option(10.0, help="On SIGTERM: time given to running runs."),
    metrics_port: int | None = typer.Option(None, help="Serve this process's Prometheus metrics here."),
    url: str | None = URL,
) -> None:
    """Execute runs: claim due runs of the app's tasks, run them, record how they end."""
    # Until the worker's own handlers are in place (after imports and connecting), a
    # SIGTERM simply ends the process cleanly: nothing has been claimed yet.
    signal.signal(signal.SIGTERM, _stop_before_start)
    from ..engine.supervisor import PoolCannotStart, run_worker, supervise
    from ..engine.worker import WorkerConfig
    from ..loader import load_app

    configure_logging()
    _use_url(url)
    if processes > 1:
        argv = ["worker", app_spec, "-c", str(concurrency), "-p", "1", "-q", queues,
                "--lease-s", str(lease_s), "--drain-grace-s", str(drain_grace_s)]
        try:
            code = supervise(argv, processes)
        except PoolCannotStart as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            code = exc.exit_code
        raise typer.Exit(code)
    with clear_errors():
        app = load_app(app_spec)
        options: dict[str, Any] = dict(concurrency=concurrency, queues=queues.split(","),
                                       lease_s=lease_s, drain_grace_s=drain_grace_s,
                                       schedule_clock=clock_from_env(
                                           os.environ.get("RUNWRIGHT_SCHEDULE_CLOCK")))
        WorkerConfig(**options)  # a bad setting is refused now, before anything starts
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, addr="127.0.0.1")
        from ..engine.worker import WorkerCrashed

        try:
            run_worker(lambda: app.worker(**options), app.close)
        except WorkerCrashed as exc:
            err.print(f"[bold red]worker crashed:[/] {exc}")
            raise typer.Exit(1) from None


@cli.command()
def serve(
    app_spec: str = typer.Argument(..., metavar="MODULE:APP"),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    url: str | None = URL,
) -> None:
    """Serve the HTTP API (REST, SSE, OpenAPI at /openapi.json). Bearer tokens come from
    RUNWRIGHT_TOKENS="token=tenant,..."; RUNWRIGHT_AUTH=off serves without auth (local use)."""
    import uvicorn

    from ..engine.supervisor import event_loop_runner
    from ..loader import load_app
    from ..server import Auth, create_server

    configure_logging()
    with clear_errors():
        _use_url(url)
        app = load_app(app_spec)
        auth = Auth.from_env()
    server = uvicorn.Server(uvicorn.Config(create_server(app, auth), host=host, port=port,
                                           log_level="warning"))

    async def go() -> None:
        # Opened here, in the server's loop, before the server starts: a store that cannot be
        # reached is one line and exit 3, as for every command, not a traceback from the
        # lifespan (which then finds the app open).
        await app.open()
        try:
            await server.serve()
        finally:
            await app.close()

    with clear_errors(), event_loop_runner() as runner:
        runner.run(go())


@cli.command()
def submit(
    app_spec: str | None = typer.Argument(None, metavar="[MODULE:APP]",
                                          help="The app; without it, only built-in job types."),
    task: str | None = typer.Argument(None, help="Task name (or give it in --json)."),
    args: str = typer.Option("{}", "--args", "-a", help="Keyword arguments as a JSON object."),
    spec: str | None = typer.Option(None, "--json", help='A whole submission as JSON, e.g. '
                                    '{"type": "webhook", "args": {"url": "..."}, "key": "k1"}; '
                                    '@path reads it from a file.'),
    key: str | None = typer.Option(None, help="Idempotency key: the same key is the same run."),
    priority: int | None = typer.Option(None, help="0 critical .. 3 low."),
    delay_s: float | None = typer.Option(None, help="Start no sooner than this many seconds."),
    queue: str | None = typer.Option(None),
    wait: bool = typer.Option(False, "--wait", help="Wait for the run to end and print its result."),
    url: str | None = URL,
) -> None:
    """Submit a run of TASK, or of the job a --json document describes."""
    from ..loader import load_app

    with clear_errors():
        _use_url(url)
        if spec is not None:
            document = _json_object(_read_spec(spec), "--json")
            task = task or document.get("type") or document.get("task")
            kwargs = _json_object(document.get("args", {}), "args in --json")
            key = key or document.get("key")
            priority = priority if priority is not None else document.get("priority")
            delay_s = delay_s if delay_s is not None else document.get("delay_s")
            queue = queue or document.get("queue")
        else:
            kwargs = _json_object(_parse_json(args, "--args"), "--args")
        if not task:
            raise InvalidInput("name the task (runwright submit MODULE:APP TASK) or give "
                               '--json \'{"type": "webhook", "args": {...}}\'')
        app = load_app(app_spec) if app_spec else App()

    async def go() -> Any:
        try:
            handle = await app.submit(task, key=key, priority=priority, delay_s=delay_s,
                                      queue=queue, **kwargs)
            verb = "exists" if handle.existed else "submitted"
            out.print(f"run {handle.id} {verb} (key {handle.run.key}, state {handle.state.value})")
            if wait:
                try:
                    out.print_json(json.dumps(await handle.result()))
                except RunFailed as exc:
                    err.print(f"[bold red]{exc}[/]")
                    raise typer.Exit(1) from None
        finally:
            await app.close()

    run_async(go)


def _read_spec(spec: str) -> Any:
    if spec.startswith("@"):
        try:
            with open(spec[1:]) as source:
                spec = source.read()
        except OSError as exc:
            raise InvalidInput(f"--json {spec}: {exc}") from None
    return _parse_json(spec, "--json")


def _parse_json(text: str, what: str) -> Any:
    from ..serde import decode

    return decode(text, what)  # not JSON, or nested too deep: a clear InvalidInput


def _json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object")
    return value


@cli.command()
def runs(
    state: list[str] | None = typer.Option(None, "--state", "-s", help="Filter; repeatable."),
    task: str | None = typer.Option(None, "--task", "-t"),
    queue: str | None = typer.Option(None, "--queue", "-q"),
    limit: int = typer.Option(50, "--limit", "-n"),
    url: str | None = URL,
) -> None:
    """List runs, newest first."""
    with clear_errors():
        states = [_state(s) for s in state or []]
    found = with_app(url, lambda app: app.list_runs(states=states, task=task, queue=queue, limit=limit))
    out.print(views.runs_table(found))


@cli.command()
def status(url: str | None = URL) -> None:
    """Queued, running, done and dead runs, workers alive, the oldest due run's wait."""
    from .. import metrics

    found = with_app(url, metrics.summary)
    out.print(views.summary_table(found))


@cli.command()
def dead(limit: int = typer.Option(50, "--limit", "-n"), url: str | None = URL) -> None:
    """List the dead-letter queue: runs whose attempts ran out (re-queue with `retry`)."""
    found = with_app(url, lambda app: app.dead_letters(limit=limit))
    out.print(views.runs_table(found, title="dead letters"))


@cli.command()
def show(run_id: int = typer.Argument(...), url: str | None = URL) -> None:
    """Show one run in full, with its attempts (when, where, how each ended)."""

    async def go(app: App) -> tuple[Any, Any]:
        return (await app.get(run_id)).run, await app.attempts(run_id)

    run, attempts = with_app(url, go)
    out.print(views.run_panel(run))
    if attempts:
        out.print(views.attempts_table(attempts))


@cli.command()
def follow(run_id: int = typer.Argument(...),
           after: int = typer.Option(0, "--after", help="Start after this event seq."),
           url: str | None = URL) -> None:
    """Print a run's events live; exit when the run ends (1 if it did not succeed)."""

    async def go(app: App) -> RunState:
        async for item in app.events(run_id, after=after):
            out.print(views.event_line(item), highlight=False)
        return (await app.get(run_id)).state

    state = with_app(url, go)
    raise typer.Exit(0 if state is RunState.SUCCEEDED else 1)


@cli.command()
def cancel(run_id: int = typer.Argument(...), url: str | None = URL) -> None:
    """Cancel a run: a queued one never starts; a running one stops within a second."""
    run = with_app(url, lambda app: app.cancel(run_id))
    what = "cancel requested (its worker stops it)" if run.state is RunState.RUNNING else run.state.value
    out.print(f"run {run.id}: {what}")


@cli.command()
def retry(
    run_ids: list[int] | None = typer.Argument(None, help="Runs to re-queue."),
    all_dead: bool = typer.Option(False, "--all-dead", help="Re-queue every dead letter."),
    task: str | None = typer.Option(None, "--task", help="With --all-dead: only this task's."),
    url: str | None = URL,
) -> None:
    """Re-queue dead or failed runs with fresh attempts (completed steps keep their results)."""

    async def go(app: App) -> tuple[list[Any], dict[int, str]]:
        ids = list(run_ids or [])
        if all_dead:
            ids += [run.id for run in await app.dead_letters(task=task, limit=100_000)]
        return await app.retry_many(ids)

    with clear_errors():
        if not run_ids and not all_dead:
            raise InvalidInput("name the runs to retry, or give --all-dead")
    done, refused = with_app(url, go)
    for handle in done:
        out.print(f"run {handle.id}: {handle.state.value}")
    for run_id, reason in refused.items():
        err.print(f"run {run_id}: not retried: {reason}", highlight=False)
    out.print(f"{len(done)} re-queued, {len(refused)} refused")
    if refused:
        raise typer.Exit(2)


@cli.command()
def schedules(
    action: str = typer.Argument("list", help="list, create, pause, resume or delete."),
    name: str | None = typer.Argument(None, help="The schedule (for all but list)."),
    app_spec: str | None = typer.Option(None, "--app", help="MODULE:APP (create: to check the task)."),
    task: str | None = typer.Option(None, "--task", help="create: the task to run."),
    cron: str | None = typer.Option(None, "--cron", help="create: croniter syntax, seconds last."),
    args: str = typer.Option("{}", "--args", help="create: the task's arguments as JSON."),
    tz: str = typer.Option("UTC", "--tz", help="create: an IANA time zone."),
    misfire: str = typer.Option("skip", "--misfire", help="create: skip or catch_up."),
    url: str | None = URL,
) -> None:
    """List schedules with their next fire times; create, pause, resume or delete one."""
    if action == "list":
        found = with_app(url, lambda app: app.list_schedules())
        out.print(views.schedules_table(found))
        return
    operations = {"pause": App.pause_schedule, "resume": App.resume_schedule,
                  "delete": App.delete_schedule}
    with clear_errors():
        if action not in (*operations, "create") or not name:
            raise InvalidInput(f"use `runwright schedules list` or `runwright schedules "
                               f"create|pause|resume|delete NAME` (got {action!r})")
        if action == "create":
            _create_schedule(name, app_spec, task, cron, args, tz, misfire, url)
            return
    with_app(url, lambda app: operations[action](app, name))
    out.print(f"schedule {name}: {action}d")


def _create_schedule(name: str, app_spec: str | None, task: str | None, cron: str | None,
                     args: str, tz: str, misfire: str, url: str | None) -> None:
    from ..loader import load_app

    if not task or not cron:
        raise InvalidInput("create needs --task and --cron")
    _use_url(url)
    app = load_app(app_spec) if app_spec else App()
    spec = app.schedule_spec(name, cron=cron, task=task, args=_json_object(_parse_json(args, "--args"),
                             "--args"), tz=tz, misfire=misfire, catch_up_limit=10, queue=None,
                             priority=None)

    async def save() -> Any:
        try:
            return await app.save_schedule(spec)
        finally:
            await app.close()

    saved = run_async(save)
    out.print(views.schedules_table([saved]))


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
    runs_count: int = typer.Option(300, "--runs", help="Runs to submit."),
    workers: int = typer.Option(3, "--workers", help="Worker processes."),
    url: str | None = typer.Option(None, "--url", help="Defaults to a fresh ./runwright-demo.db."),
) -> None:
    """Show the core guarantee: worker processes, a SIGKILL midway, every run done once."""
    from .demo import run_demo

    with clear_errors():
        ok = run_demo(runs_count, workers, url)
    raise typer.Exit(0 if ok else 1)


def _use_url(url: str | None) -> None:
    """--url wins over RUNWRIGHT_URL: set before the app module builds its App."""
    if url:
        os.environ["RUNWRIGHT_URL"] = url


def _stop_before_start(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _state(text: str) -> RunState:
    try:
        return RunState(text)
    except ValueError:
        raise InvalidInput(f"unknown state {text!r}; one of {', '.join(s.value for s in RunState)}") from None


def main() -> None:
    cli(prog_name="runwright")


if __name__ == "__main__":
    main()
