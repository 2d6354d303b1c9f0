"""`runwright fleet workers | broadcast | recycle`: the fleet bus from a terminal.

The fleet is the root `{namespace}:v{major}`: the namespace is RUNWRIGHT_NAMESPACE, the
major the app's declared version (`--app MODULE:APP`), else `--major` (default 0).
"""

from __future__ import annotations

import json
from typing import Any

import typer

from ..app import App
from ..errors import InvalidInput
from ._exits import clear_errors
from ._main import URL, with_app
from ._output import out
from ._params import Integer, Number

__all__ = ["fleet_cli"]

fleet_cli = typer.Typer(help="The fleet bus: who is alive, broadcasts, rolling recycles.",
                        no_args_is_help=True)
APP = typer.Option(None, "--app", metavar="MODULE:APP", help="The app whose version names the fleet.")
MAJOR = typer.Option(None, "--major", click_type=Integer(0, 2**31 - 1),
                     help="The fleet's major version, without --app. Defaults to 0.")
JSON = typer.Option(False, "--json", help="Print JSON instead of a table.")
OUTCOME_STYLE = {"applied": "green", "failed": "red", "missing": "red", "departed": "magenta",
                 "timed_out": "yellow", "resyncing": "cyan", "recycling": "cyan", "stale": "red"}


def _app(url: str | None, app_spec: str | None, major: int | None) -> App:
    if app_spec is not None and major is not None:
        raise InvalidInput("give --app or --major, not both")
    if app_spec is None:
        return App(url, auto_migrate=False, version=f"{major or 0}.0.0")
    from ._loader import load_app

    if url:
        import os

        os.environ["RUNWRIGHT_URL"] = url
    return load_app(app_spec)


def _with_fleet(url: str | None, app_spec: str | None, major: int | None, use: Any) -> Any:
    with clear_errors():
        app = _app(url, app_spec, major)
    return with_app(app.url, lambda _opened: use(app), app=app)


@fleet_cli.command("workers")
def workers(json_out: bool = JSON, app_spec: str | None = APP, major: int | None = MAJOR,
            url: str | None = URL) -> None:
    """The census: every live process's name, generation, state, host, pid, heartbeat age."""
    rows = _with_fleet(url, app_spec, major, lambda app: app.fleet.workers())
    if json_out:
        out.print_json(json.dumps(rows))
        return
    from rich.table import Table

    table = Table(title=f"fleet ({len(rows)})")
    for column in ("name", "generation", "state", "host", "pid", "heartbeat age", "drain"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], str(row["generation"]), row["state"], row["host"], str(row["pid"]),
                      f"{row['heartbeat_age_s']:.1f} s", f"{row['drain_s']:g} s")
    out.print(table)


@fleet_cli.command("broadcast")
def broadcast(op: str = typer.Argument(..., help="The op, e.g. ping, evict-cache, reload-config."),
              payload: str = typer.Option("{}", "--payload", help="A JSON object for the handlers."),
              timeout_s: float | None = typer.Option(None, "--timeout-s",
                                                     click_type=Number(0, 600, low_open=True),
                                                     help="Window; defaults to 5 s."),
              json_out: bool = JSON, app_spec: str | None = APP, major: int | None = MAJOR,
              url: str | None = URL) -> None:
    """Send OP to every live process; one row per process. Exit 0 only when every row is
    `applied` (1 otherwise, also when no process was there to apply it)."""
    with clear_errors():
        try:
            body = json.loads(payload)
        except ValueError as exc:
            raise InvalidInput(f"--payload is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise InvalidInput("--payload must be a JSON object")
    rows = _with_fleet(url, app_spec, major,
                       lambda app: app.fleet.broadcast(op, body, timeout_s=timeout_s))
    if json_out:
        out.print_json(json.dumps([row.to_dict() for row in rows]))
    else:
        from rich.table import Table

        table = Table(title=f"{op}: {len(rows)} processes")
        for column in ("name", "generation", "outcome", "host", "pid", "error / detail"):
            table.add_column(column)
        for row in rows:
            style = OUTCOME_STYLE[row.outcome.value]
            note = row.error or ("" if row.detail is None else json.dumps(row.detail))
            table.add_row(row.name, str(row.generation), f"[{style}]{row.outcome.value}[/]", row.host,
                          str(row.pid), note[:80])
        out.print(table)
    raise typer.Exit(0 if rows and all(row.outcome == "applied" for row in rows) else 1)


@fleet_cli.command("recycle")
def recycle(kind: str = typer.Option("worker", "--kind", help="Which processes to roll."),
            json_out: bool = JSON, app_spec: str | None = APP, major: int | None = MAJOR,
            url: str | None = URL) -> None:
    """A rolling recycle, one process at a time, each confirmed by the census (its life gone,
    the ready capacity back). Stops at the first that does not converge; exit 1 then."""
    report = _with_fleet(url, app_spec, major, lambda app: app.fleet.recycle(kind))
    if json_out:
        out.print_json(json.dumps(report.to_dict()))
    else:
        for step in report.steps:
            mark = "[green]recycled[/]" if step.converged else f"[red]stopped:[/] {step.why}"
            out.print(f"{step.name} (generation {step.generation}): {mark} in {step.seconds:.1f} s")
        if not report.steps:
            out.print(f"no ready {kind} process to recycle")
    raise typer.Exit(0 if report.ok and report.steps else 1)
