"""`runwright thread list | show | cancel | follow`: threads and their runs."""

from __future__ import annotations

from typing import Any

import typer

from ..app import App
from ..runs import RunState
from . import _views as views
from ._main import DECODE, JSON_OUT, URL, cli, payload_view, with_app
from ._output import as_json as as_json_value
from ._output import out, print_json
from ._output import show as show_out
from ._params import (
    AFTER,
    LIMIT,
)

__all__ = ["thread_cancel", "thread_cli", "thread_follow", "thread_list", "thread_show"]


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
                decode: bool = DECODE, url: str | None = URL) -> None:
    """Show a thread: its runs, newest first, and its message history, in order."""
    payload_view(decode, f"thread {name}")

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
                  decode: bool = DECODE, url: str | None = URL) -> None:
    """Print a thread's events live, run after run (`tseq run:seq time kind data`), until
    interrupted. Resume with --after at the last tseq printed."""
    payload_view(decode, f"thread {name}'s events")

    async def go(app: App) -> None:
        async for item in _scope(app, tenant).follow_thread(name, after=after):
            out.print(f"{item.tseq:>5} {item.run_id}:{views.event_line(item).lstrip()}", highlight=False)

    with_app(url, go)
