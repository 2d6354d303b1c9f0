"""`runwright fork`: a new run that begins where another was at a step of its journal, and
runs the rest on the code deployed now (the library's `App.fork`)."""

from __future__ import annotations

from typing import Any

import typer

from ..app import App
from ..errors import InvalidInput
from ._exits import clear_errors
from ._main import RUN_ID, URL, cli, run_async, use_url
from ._output import out
from ._params import json_argument

__all__ = ["fork", "step_of"]


def step_of(text: str) -> int | str:
    """--from-step: a journal position (ASCII digits) or a step's name (anything else)."""
    return int(text) if text.isascii() and text.isdigit() else text


@cli.command()
def fork(
    run_id: int = RUN_ID,
    from_step: str = typer.Option(..., "--from-step", metavar="N|NAME",
                                  help="Where the fork begins: a journal position N (it keeps the "
                                       "original's entries 0 to N-1, replayed) or a step's name "
                                       "(every entry before that step's first). `runwright show "
                                       "RUN` lists the journal."),
    args: str | None = typer.Option(None, "--args", "-a", metavar="JSON",
                                    help="Arguments to change, as a JSON object merged over the "
                                         "original's."),
    key: str | None = typer.Option(None, "--key", metavar="KEY",
                                   help="The fork's idempotency key: the same key is the same fork."),
    app_spec: str | None = typer.Option(None, "--app", metavar="MODULE:APP",
                                        help="The app as deployed now: the changed arguments are "
                                             "checked against its task, and the fork takes its "
                                             "retry policy and version (without it, the original's, "
                                             "and any worker of the task may run it)."),
    url: str | None = URL,
) -> None:
    """Fork a run from a step: a new run whose journal holds the original's entries before
    that step (their recorded results, nothing called again) and which runs the rest on
    the code deployed now. A step past the journal's end, or a name it never journaled,
    is refused (exit 2); no such run: exit 5."""
    from ._loader import load_app

    with clear_errors():
        use_url(url)
        edits = json_argument(args, "--args")
        if edits is not None and not isinstance(edits, dict):
            raise InvalidInput(f"--args is a JSON object of the arguments to change, got {args}")
        app = load_app(app_spec) if app_spec else App()

    async def go() -> Any:
        try:
            return await app.fork(run_id, step_of(from_step), args=edits, key=key)
        finally:
            await app.close()

    handle = run_async(go)
    verb = "exists" if handle.existed else "forked"
    out.print(f"run {handle.id} {verb} from run {run_id} (key {handle.run.key}, state {handle.state.value})",
              highlight=False, markup=False)
