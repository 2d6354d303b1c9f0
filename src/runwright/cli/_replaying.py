"""`runwright replay` and `runwright export-runs`: will the code of an app replay the runs
in flight (and recently ended) before it is deployed under them?"""

from __future__ import annotations

import json
from typing import Any

import typer

from ..errors import InvalidInput
from ..runs import RunState
from ._exits import FAILED, clear_errors
from ._main import URL, cli, use_url, with_app
from ._output import out
from ._params import SECONDS, TEXT, Integer

__all__ = ["bulk", "export_runs", "replay"]

STATES = ",".join(s.value for s in (RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED,
                                     RunState.DEAD))


@cli.command()
def replay(
    app_spec: str = typer.Argument(..., metavar="MODULE:APP", click_type=TEXT,
                                   help="The code to replay the runs on."),
    source: str | None = typer.Option(None, "--from", metavar="FILE", click_type=TEXT,
                                      help="Replay the runs of a file `export-runs` wrote, not the store's."),
    task: str | None = typer.Option(None, "--task", click_type=TEXT, help="Only this task's runs."),
    states: str = typer.Option(STATES, "--states", click_type=TEXT, help="Comma-separated run states."),
    max_age_s: float | None = typer.Option(None, "--max-age-s", metavar="SECONDS", click_type=SECONDS,
                                           help="Only runs submitted this recently."),
    limit: int = typer.Option(1000, "--limit", click_type=Integer(1, 10_000),
                             help="At most this many runs, newest first."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object a run, for CI."),
    url: str | None = URL,
) -> None:
    """Replay recorded runs on the code of MODULE:APP, executing nothing: exit 1 if any would break."""
    from ..testing import replay as replay_runs

    with clear_errors():
        chosen = _states(states)
        use_url(url)
        from ._loader import load_app

        app = load_app(app_spec)

    async def go(opened: Any) -> Any:
        created_after = None if max_age_s is None else opened.runtime.clock() - max_age_s
        return await replay_runs(opened, source=source, task=task, states=chosen, created_after=created_after,
                                 limit=limit)

    outcomes = with_app(url, go, app=app)
    broken = [o for o in outcomes if not o.ok]
    if as_json:
        for outcome in outcomes:
            print(json.dumps(outcome.as_json()))
    else:
        for outcome in broken:
            out.print(f"run {outcome.run_id} ({outcome.task}): {outcome.status} at #{outcome.position}: "
                      f"{outcome.detail}", highlight=False)
        out.print(f"{len(outcomes) - len(broken)} of {len(outcomes)} runs replay cleanly on {app_spec}",
                  highlight=False)
    if broken:
        raise typer.Exit(FAILED)


@cli.command("export-runs")
def export_runs(
    path: str = typer.Argument(..., metavar="FILE", click_type=TEXT,
                               help="Where to write the runs (JSON lines)."),
    task: str | None = typer.Option(None, "--task", click_type=TEXT, help="Only this task's runs."),
    states: str = typer.Option(STATES, "--states", click_type=TEXT, help="Comma-separated run states."),
    limit: int = typer.Option(1000, "--limit", click_type=Integer(1, 10_000),
                             help="At most this many runs, newest first."),
    url: str | None = URL,
) -> None:
    """Write runs with their journals to a file a CI job replays (`runwright replay --from`)."""
    from ..testing import export_runs as export

    with clear_errors():
        chosen = _states(states)
    count = with_app(url, lambda app: export(app, path, task=task, states=chosen, limit=limit))
    out.print(f"wrote {count} runs to {path}", highlight=False)


def _states(text: str) -> tuple[RunState, ...]:
    try:
        return tuple(RunState(s.strip()) for s in text.split(",") if s.strip())
    except ValueError:
        raise InvalidInput(f"--states: each of {text!r} must be one of "
                           f"{', '.join(s.value for s in RunState)}") from None


@cli.command()
def bulk(
    action: str = typer.Argument(..., metavar="ACTION", click_type=TEXT,
                                 help="retry, cancel, resume, or fork (each run from its failing step)."),
    task: str | None = typer.Option(None, "--task", click_type=TEXT, help="Only this task's runs."),
    states: str | None = typer.Option(None, "--states", click_type=TEXT,
                                      help="Comma-separated run states (default: "
                                                             "dead,failed for retry and fork; "
                                                             "queued,running for cancel; resume "
                                                             "takes paused runs)."),
    error: str | None = typer.Option(None, "--error", click_type=TEXT,
                                     help="Only runs whose error contains this text."),
    queue: str | None = typer.Option(None, "--queue", click_type=TEXT, help="Only this queue's runs."),
    max_age_s: float | None = typer.Option(None, "--max-age-s", metavar="SECONDS", click_type=SECONDS,
                                           help="Only runs submitted this recently."),
    limit: int = typer.Option(1000, "--limit", click_type=Integer(1, 100_000),
                             help="At most this many runs, newest first."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count and sample what matches; change nothing."),
    as_json: bool = typer.Option(False, "--json", help="The report as JSON, for scripts."),
    url: str | None = URL,
) -> None:
    """Retry, cancel, resume or fork (from its failing step) every run that matches a
    filter, and report what was refused and why."""
    import sys

    with clear_errors():
        chosen = _states(states) if states else ()
        if action not in ("retry", "cancel", "resume", "fork"):
            raise InvalidInput(f"ACTION is retry, cancel, resume or fork, got {action!r}")

    def shown(acted: int, matched: int) -> None:
        if not as_json and not dry_run:
            print(f"{acted} of {matched} matched so far", file=sys.stderr)

    async def go(app: Any) -> Any:
        created_after = None if max_age_s is None else app.runtime.clock() - max_age_s
        return await app.bulk(action, states=chosen, task=task, queue=queue, error=error,
                              created_after=created_after, limit=limit, dry_run=dry_run, progress=shown)

    report = with_app(url, go)
    if as_json:
        print(json.dumps(report.as_json()))
        return
    capped = f" (capped at {limit}: more match)" if report.capped else ""
    if dry_run:
        out.print(f"{report.matched} runs match{capped}; a sample: {report.sample}", highlight=False)
        return
    out.print(f"{action}: {len(report.done)} of {report.matched} runs{capped}; {len(report.refused)} refused",
              highlight=False)
    for run_id, why in list(report.refused.items())[:20]:
        out.print(f"  run {run_id}: {why}", highlight=False)
