"""`runwright publish`: publish an event, delivered to the runs waiting for it
(`ctx.wait_event`) and starting the runs of the tasks declared to start on it."""

from __future__ import annotations

import getpass
import json

import typer

from ..core import _inputs as inputs
from ..core._events import EventPublished
from ._exits import clear_errors
from ._main import URL, cli, use_url, with_app
from ._output import out
from ._params import json_argument

__all__ = ["publish"]


@cli.command()
def publish(
    name: str = typer.Argument(..., help="The event's name: what a run's ctx.wait_event(name) waits for."),
    data: str | None = typer.Argument(None, metavar="[JSON]",
                                      help="The event's data as JSON, e.g. '{\"doc_id\": 7}' (none: null)."),
    event_id: str | None = typer.Option(None, "--id",
                                        help="The event's id: published again, it delivers and starts "
                                             "nothing again (default: a fresh one)."),
    by: str | None = typer.Option(None, "--by", help="Who publishes it (a name, not blank). Defaults to the "
                                                     "login name."),
    app_spec: str | None = typer.Option(None, "--app", metavar="MODULE:APP",
                                        help="The app whose tasks start on the event (on_event=); without "
                                             "it, the event is delivered to waiting runs only."),
    as_json: bool = typer.Option(False, "--json", help="The outcome as JSON, for scripts."),
    url: str | None = URL,
) -> None:
    """Publish an event in the operator's scope: delivered once to every waiting run (of no
    tenant) whose match fits; it starts a run of each task declared to start on it."""
    with clear_errors():
        value = json_argument(data, "the event's data")
        who = inputs.answerer(by, "--by") if by is not None else getpass.getuser()
        app = None
        if app_spec is not None:
            from ._loader import load_app

            use_url(url)
            app = load_app(app_spec)
    published = with_app(url, lambda a: a.publish_event(name, value, id=event_id, by=who), app=app)
    if as_json:
        print(json.dumps(published.as_json()))
        return
    out.print(_said(published, app_spec is not None), highlight=False)


def _said(p: EventPublished, with_app: bool) -> str:
    if p.existed:
        head = f"event {p.id!r} ({p.name}) was published before: nothing delivered again"
    else:
        head = f"event {p.id!r} ({p.name}) published: {len(p.woken)} waiting runs woken"
    if p.full:
        head += f", {len(p.full)} not delivered to (as many pending signals as they may keep)"
    if p.started:
        head += "; started run" + ("s " if len(p.started) > 1 else " ") + ", ".join(map(str, p.started))
    elif not with_app:
        head += "; no run started (give --app to start the tasks declared on_event)"
    return head

