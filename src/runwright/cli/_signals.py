"""`runwright signal`, `signals` and `query`: send a live run a signal, list a run's, read
the state it published and answer its task's queries."""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING

import typer

from ..core import _inputs as inputs
from ..core._signals import Signal
from ..errors import InvalidInput
from ._exits import clear_errors
from ._main import URL, cli, use_url, with_app
from ._output import out
from ._params import DOCUMENT, ID, TEXT, json_argument
from ._views import instant

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["patches", "query", "signal", "signals"]


@cli.command()
def signal(
    run_id: int = typer.Argument(..., click_type=ID, help="The run to signal."),
    name: str = typer.Argument(..., click_type=TEXT,
                               help="The signal's name: what the run's ctx.wait_signal(name) "
                                         "waits for."),
    payload: str | None = typer.Argument(None, metavar="[JSON]", click_type=DOCUMENT,
                                         help="The payload as JSON: true, \"text\", {\"k\": 1}... "
                                              "(none: null)."),
    key: str | None = typer.Option(None, "--key", click_type=TEXT,
                                   help="Idempotency key: sent again, one signal is kept."),
    by: str | None = typer.Option(None, "--by", click_type=TEXT,
                                  help="Who sends it (a name, not blank). Defaults to the "
                                                     "login name."),
    as_json: bool = typer.Option(False, "--json", help="The signal as JSON, for scripts."),
    url: str | None = URL,
) -> None:
    """Send a run a signal; it is kept until the run's wait takes it, once."""
    with clear_errors():
        value = json_argument(payload, "the payload")
        who = inputs.answerer(by, "--by") if by is not None else getpass.getuser()
    sent = with_app(url, lambda app: app.signal(run_id, name, value, key=key, by=who))
    if as_json:
        print(json.dumps(sent.as_json()))
        return
    out.print(f"signal {sent.seq} {sent.name!r} sent to run {sent.run_id} by {sent.sent_by}", highlight=False)


@cli.command()
def signals(
    run_id: int = typer.Argument(..., click_type=ID, help="The run whose signals to list."),
    pending: bool = typer.Option(False, "--pending", help="Only the signals no wait has taken yet."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array, for scripts."),
    url: str | None = URL,
) -> None:
    """List a run's signals in the order sent, and which wait took each."""
    found = with_app(url, lambda app: app.signals(run_id, pending=pending))
    if as_json:
        print(json.dumps([s.as_json() for s in found]))
        return
    out.print(_table(found))


@cli.command()
def query(
    run_id: int = typer.Argument(..., click_type=ID, help="The run to ask."),
    name: str | None = typer.Argument(None, click_type=TEXT,
                                      help="A query of the run's task (@task.query); none: the "
                                                 "state the run published."),
    args: str | None = typer.Argument(None, metavar="[JSON]", click_type=DOCUMENT,
                                      help="The query's arguments, a JSON object."),
    app_spec: str | None = typer.Option(None, "--app", metavar="MODULE:APP", click_type=TEXT,
                                        help="The app that defines the task's queries (needed with NAME)."),
    url: str | None = URL,
) -> None:
    """Print a run's published state (ctx.set_state), or the answer of its task's query, as JSON."""
    with clear_errors():
        given = json_argument(args, "the query's arguments") if args is not None else {}
        if not isinstance(given, dict):
            raise InvalidInput(f"the query's arguments are a JSON object, got {args!r}")
        if name is not None and app_spec is None:
            raise InvalidInput("a query runs the task's code: give --app MODULE:APP that defines it")
        app = None
        if app_spec is not None:
            from ._loader import load_app

            use_url(url)
            app = load_app(app_spec)
    if name is None:
        print(json.dumps(with_app(url, lambda a: a.state(run_id), app=app)))
        return
    print(json.dumps(with_app(url, lambda a: a.query(run_id, name, **given), app=app)))


@cli.command()
def patches(
    patch_id: str = typer.Argument(..., click_type=TEXT, help="The patch id given to ctx.patched."),
    task: str | None = typer.Option(None, "--task", click_type=TEXT, help="Only this task's runs."),
    as_json: bool = typer.Option(False, "--json", help="The report as JSON, for scripts."),
    url: str | None = URL,
) -> None:
    """Which live runs took a patch's new path, and which still depend on its old branch."""
    with clear_errors():
        from ..core._journal import check_patch_id

        try:
            check_patch_id(patch_id)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    report = with_app(url, lambda app: app.patch_runs(patch_id, task=task))
    if as_json:
        print(json.dumps({"patch_id": report.patch_id, "patched": report.patched,
                          "unpatched": report.unpatched, "complete": report.complete}))
        return
    more = "" if report.complete else " (the newest ones only: more were not read)"
    out.print(f"patch {patch_id!r}: {len(report.patched)} live runs took the new path, "
              f"{len(report.unpatched)} did not{more}", highlight=False)
    if report.unpatched:
        out.print("still on the old path (keep the old branch): "
                  + ", ".join(map(str, report.unpatched[:50])), highlight=False)



def _table(found: list[Signal]) -> Table:
    from rich.table import Table

    table = Table(title=f"signals ({len(found)})")
    for column in ("seq", "name", "payload", "sent", "by", "taken by step"):
        table.add_column(column)
    for s in found:
        taken = "pending" if s.position is None else f"#{s.position} at {instant(s.taken_at or 0)}"
        table.add_row(str(s.seq), s.name, json.dumps(s.payload)[:80], instant(s.sent_at), s.sent_by or "-",
                      taken)
    return table
