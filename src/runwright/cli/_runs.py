"""`runwright submit | runs | show | events | follow | cancel | retry | dead | status |
workers`: runs from a terminal, submitted, read, followed and acted on."""

from __future__ import annotations

import json
from typing import Any

import typer

from ..app import App
from ..client._listing import checked_waiting
from ..client._scope import RETRY_REFUSALS
from ..client._why import Waiting
from ..errors import InvalidInput, RunFailed, RunWaitTimeout
from ..runs import Run, RunState, WaitReason
from ..tasks._submission import MAX_PRIORITY, PRIORITY_HELP
from . import _views as views
from ._exits import FAILED, TIMED_OUT, clear_errors, code_for, err, fail
from ._main import DECODE, JSON_OUT, RUN_ID, URL, cli, payload_view, run_async, use_url, with_app
from ._output import as_json, escape, out, print_json
from ._output import show as show_out
from ._params import (
    AFTER,
    ID,
    LIMIT,
    SECONDS,
    SECONDS_OR_ZERO,
    Integer,
)

__all__ = ["cancel", "dead", "events", "follow", "retry", "runs", "show", "status", "submit", "workers"]


@cli.command()
def submit(
    app_spec: str | None = typer.Argument(None, metavar="MODULE:APP",
                                          help="The app; without it, only built-in job types."),
    task: str | None = typer.Argument(None, metavar="TASK", help="Task name (or give it in --json)."),
    args: str | None = typer.Option(None, "--args", "-a", metavar="JSON",
                                    help="Keyword arguments as a JSON object (beside --json, in place "
                                         "of its args). Defaults to {}."),
    spec: str | None = typer.Option(None, "--json", metavar="JSON", help='A whole submission as JSON, e.g. '
                                    '{"task": "webhook", "args": {"url": "..."}, "key": "k1"}, with '
                                    'keys task, args, key, priority, delay_s, run_at, queue, thread, '
                                    'on_busy, on_conflict, budget, traceparent (any other is '
                                    'refused); @path reads it from a file. Options given beside it '
                                    'win.'),
    key: str | None = typer.Option(None, metavar="KEY",
                                   help="Idempotency key: the same key is the same run."),
    priority: int | None = typer.Option(None, metavar="N", click_type=Integer(0, MAX_PRIORITY),
                                        help=PRIORITY_HELP),
    delay_s: float | None = typer.Option(None, metavar="SECONDS", click_type=SECONDS_OR_ZERO,
                                         help="Start no sooner than this many seconds."),
    run_at: str | None = typer.Option(None, "--run-at", metavar="WHEN",
                                      help="Start no sooner than this time: ISO 8601 with a zone "
                                           "(2026-12-01T09:00:00Z, ...+02:00) or epoch seconds."),
    timeout_s: float | None = typer.Option(None, "--timeout-s", metavar="SECONDS", click_type=SECONDS,
                                           help="With --wait: stop waiting after this long, exit 6 "
                                                "(the run goes on)."),
    queue: str | None = typer.Option(None, metavar="QUEUE", help="The queue. Defaults to the task's."),
    thread: str | None = typer.Option(None, "--thread", metavar="THREAD",
                                      help="The conversation the run joins (runs of a thread never "
                                           "overlap)."),
    on_busy: str | None = typer.Option(None, "--on-busy", metavar="reject|enqueue|interrupt|rollback|steer",
                                       help="With --thread, when the thread has an open run: reject "
                                            "(the default: ThreadBusy, exit 2), enqueue (run after it), "
                                            "interrupt (stop it at its next step; this run goes next), "
                                            "rollback (as interrupt, and drop what it added) or steer "
                                            "(an agent running on the thread takes the input in at its "
                                            "next model call; else as enqueue)."),
    traceparent: str | None = typer.Option(None, metavar="TRACEPARENT",
                                           help="W3C traceparent: the run's spans continue this "
                                                "trace (default: the run starts its own)."),
    on_conflict: str | None = typer.Option(None, "--on-conflict", metavar="reject|return",
                                           help="When --key names a run submitted otherwise (another "
                                                "task, arguments, queue, priority, thread or budget): "
                                                "reject (the default: KeyConflict, exit 2) or return "
                                                "that run."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the run to end and print its result."),
    url: str | None = URL,
) -> None:
    """Submit a run of TASK, or of the job a --json document describes."""
    from ._loader import load_app
    from ._submitting import gather_submission

    with clear_errors():
        use_url(url)
        task, kwargs, options = gather_submission(task, args, spec, dict(
            key=key, priority=priority, delay_s=delay_s, run_at=run_at, queue=queue,
            thread=thread, on_busy=on_busy, traceparent=traceparent, on_conflict=on_conflict))
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
                                      on_conflict=options.get("on_conflict", "reject"),
                                      traceparent=options.get("traceparent"), **kwargs)
            verb = "exists" if handle.existed else _FLOW_VERBS.get(handle.outcome, "submitted")
            if handle.replaced is not None:
                verb = f"submitted, replacing queued run {handle.replaced} (cancelled)"
            out.print(f"run {handle.id} {verb} (key {handle.run.key}, state {handle.state.value})",
                      highlight=False, markup=False)
            if wait:
                await _wait(app, handle, timeout_s)
        finally:
            await app.close()

    run_async(go)


# What a submission of a task with flow control did, as `runwright submit` says it.
_FLOW_VERBS = {None: "submitted", "new": "submitted", "delayed": "submitted, delayed by its key's throttle",
               "debounced": "debounced (this queued run took the arguments)",
               "batched": "batched (this queued run took the submission as one more item)",
               "dropped": "stands; this submission was dropped by its key's throttle"}


async def _wait(app: App, handle: Any, timeout_s: float | None) -> None:
    """Print the run's result; exit 1 if it did not succeed, 6 if it did not end in time."""
    from ._submitting import warn_if_unserved

    await warn_if_unserved(app, handle, lambda line: err.print(f"warning: {line}", highlight=False,
                                                               markup=False))
    try:
        value = await handle.result(timeout_s=timeout_s)
    except RunWaitTimeout as exc:
        raise fail(f"run {handle.id} did not end within {exc.timeout_s:g} s and goes on (runwright follow "
                   f"{handle.id}): {exc.why}", TIMED_OUT) from None
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
    waiting: str | None = typer.Option(
        None, "--waiting", "-w", metavar="REASON",
        help=f"Only queued runs waiting on this: {', '.join(reason.value for reason in WaitReason)}."),
    limit: int = typer.Option(50, "--limit", "-n", metavar="N", click_type=LIMIT,
                              help="At most this many runs."),
    as_json: bool = JSON_OUT,
    decode: bool = DECODE,
    url: str | None = URL,
) -> None:
    """List runs, newest first, and why each queued one waits."""
    payload_view(decode, "the runs listed")
    with clear_errors():
        states = [_state(s) for s in state or []]
        reason = checked_waiting(waiting)

    async def go(app: App) -> tuple[list[Run], dict[int, Waiting]]:
        found = await app.list_runs(states=states, task=task, queue=queue, thread=thread, limit=limit,
                                    waiting=reason)
        return found, await app.waiting(found)

    found, why = with_app(url, go)
    if as_json:
        return print_json([_with_waiting(run, why.get(run.id)) for run in found])
    show_out(views.runs_table(found, full=not out.is_terminal, waiting=why))


@cli.command()
def status(as_json: bool = JSON_OUT, url: str | None = URL) -> None:
    """Queued, running, done and dead runs, workers alive, the oldest due run's wait."""
    from ..observe import _metrics as metrics

    found = with_app(url, metrics.summary)
    if as_json:
        return print_json(found)
    show_out(views.summary_table(found))


@cli.command()
def dead(limit: int = typer.Option(50, "--limit", "-n", metavar="N", click_type=LIMIT,
                                   help="At most this many runs."),
         as_json: bool = JSON_OUT, decode: bool = DECODE, url: str | None = URL) -> None:
    """List the dead-letter queue: runs whose attempts ran out (re-queue with `retry`)."""
    payload_view(decode, "the dead letters listed")
    found = with_app(url, lambda app: app.dead_letters(limit=limit))
    if as_json:
        return print_json(found)
    show_out(views.runs_table(found, title="dead letters", full=not out.is_terminal))


@cli.command()
def show(run_id: int = RUN_ID, as_json: bool = JSON_OUT, decode: bool = DECODE,
         url: str | None = URL) -> None:
    """Show one run in full: its attempts (when, where, how each ended) and, if it failed,
    the traceback its worker recorded."""
    payload_view(decode, f"run {run_id}")

    async def go(app: App) -> tuple[Run, Any, Waiting | None]:
        run = (await app.get(run_id)).run
        return run, await app.attempts(run_id), (await app.waiting([run])).get(run.id)

    run, attempts, waiting = with_app(url, go)
    if as_json:
        return print_json({"run": _with_waiting(run, waiting), "attempts": attempts})
    show_out(views.run_panel(run, waiting))
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
           decode: bool = DECODE, url: str | None = URL) -> None:
    """Print a run's event log as it stands (`follow` waits for more)."""
    payload_view(decode, f"run {run_id}'s events")

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
           decode: bool = DECODE, url: str | None = URL) -> None:
    """Print a run's events live; exit when the run ends (1 if it did not succeed)."""
    payload_view(decode, f"run {run_id}'s events")

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
def pause(run_id: int = RUN_ID, url: str | None = URL) -> None:
    """Pause a run: a queued one is held now (not claimed, not woken); a running one stops
    at its next step boundary and is held, its journal kept. Resume it with `resume`."""
    run = with_app(url, lambda app: app.pause(run_id))
    what = "pause requested (it stops at its next step)" if run.state is RunState.RUNNING else "paused"
    out.print(f"run {run.id}: {what}")


@cli.command()
def resume(run_id: int = RUN_ID, url: str | None = URL) -> None:
    """Resume a paused run: it goes on from where it stopped, on the code deployed now."""
    run = with_app(url, lambda app: app.resume(run_id))
    what = "pause withdrawn (still running)" if run.state is RunState.RUNNING else "resumed"
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


def _with_waiting(run: Run, waiting: Waiting | None) -> dict[str, Any]:
    """A run as `--json` prints it: its `waiting` judged (reason, until, detail; null when it
    is not queued), as HTTP gives it, not the store's raw note."""
    return {**as_json(run), "waiting": None if waiting is None else as_json(waiting)}


def _state(text: str) -> RunState:
    try:
        return RunState(text)
    except ValueError:
        raise InvalidInput(f"unknown state {text!r}; one of {', '.join(s.value for s in RunState)}") from None
