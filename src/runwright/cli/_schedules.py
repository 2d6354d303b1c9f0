"""`runwright schedules`: list, create, pause, resume and delete schedules."""

from __future__ import annotations

from typing import Any

import typer

from ..app import App
from ..errors import InvalidInput
from . import _views as views
from ._exits import clear_errors
from ._main import URL, cli, run_async, use_url, with_app
from ._output import out, print_json
from ._output import show as show_out

__all__ = ["schedules"]


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
    from ._loader import load_app
    from ._submitting import json_object, parse_json

    if not task or not cron:
        raise InvalidInput("create needs --task and --cron")
    use_url(url)
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
