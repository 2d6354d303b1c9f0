"""The `runwright` command group and what its commands share: the store option, opening
an App for one command, the help's metavars, one-line usage errors.

Each group of commands is a module of its own (`processes`, `runs`, `schedules`,
`operating`, `threads`, `questions`, `sweep`, `fleet`), registered on `cli` when the
package is imported. Exit codes and the one-line errors live in `exits`, output for
people and scripts in `output`.
"""

from __future__ import annotations

import asyncio
import functools
import getpass
import logging
import os
import sys
import time
from typing import Any, Awaitable, Callable, Coroutine, Sequence, TypeVar

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from ..app import App
from ..core._payloads import Codecs, holds_keys, sealed_view, sealing
from ..observe._logs import event
from ._exits import BAD_INPUT, FAILED, TABLE, clear_errors, err, fail
from ._output import escape
from ._params import (
    DOCUMENT,
    ID,
    STORE_URL,
    TEXT,
    UsageError,
)

__all__ = ["DECODE", "JSON_OUT", "RUN_ID", "URL", "cli", "command", "main", "opened", "payload_view", "run",
           "run_async", "use_url", "with_app"]

T = TypeVar("T")
EXIT_CODES = "\b\nExit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in TABLE)
cli = typer.Typer(help="runwright: durable, distributed execution for agent runs and jobs.",
                  epilog=EXIT_CODES, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None)

URL = typer.Option(None, "--url", envvar="RUNWRIGHT_URL", metavar="URL", click_type=STORE_URL,
                   help="Store URL. Defaults to RUNWRIGHT_URL, else sqlite:///./runwright.db.")
JSON_OUT = typer.Option(False, "--json", help="Print JSON for scripts instead of a table.")
DECODE = typer.Option(False, "--decode",
                      help="Show encrypted payloads plain (needs the payload keys; each use is logged). "
                           "Without it they show sealed: {\"~sealed\": {\"key\": ID, \"bytes\": N}}.")
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




def use_url(url: str | None) -> None:
    """--url wins over RUNWRIGHT_URL: set before the app module builds its App."""
    if url:
        os.environ["RUNWRIGHT_URL"] = url


def payload_view(decode: bool, what: str) -> None:
    """What a reading command shows of encrypted payloads: sealed (a placeholder naming the
    key id and size) unless `--decode`, which needs this process to hold the keys (exit 2,
    one line, when it holds none) and logs who decoded what, and when (a WARNING line on
    stderr, or wherever the `runwright` logger goes). The CLI reads the database itself,
    every tenant's rows: like Temporal's CLI without a codec, it shows them encoded unless
    asked. Set before the command opens its App: its reads and its printing are all sealed."""
    if not decode:
        sealing(True)
        return
    with clear_errors():  # a bad RUNWRIGHT_PAYLOAD_KEYS: its one line
        codecs = Codecs.from_env()
    if not holds_keys() and not (codecs is not None and codecs.key_bytes):
        raise fail("--decode needs the payload keys (RUNWRIGHT_PAYLOAD_KEYS): this process has none "
                   "to open encrypted payloads with", BAD_INPUT)
    event(logging.WARNING, f"payload decode: {_user()} read {what} plain with the CLI at "
                           f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", who=_user(), decoded=what)


def _user() -> str:
    """Who ran the command, as the operating system knows them."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container's)
        return f"uid {os.getuid()}"


async def opened(_app: App) -> None:
    """Nothing more than opening the App (`with_app` opens and closes it)."""


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
        # The command's payload view (`payload_view`) ends with it: a process that runs
        # commands in turn (a test's) gets its own view back.
        with clear_errors(), sealed_view(False):  # clear_errors: also what is raised printing a payload
            code = group.main(args=argv, prog_name="runwright", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
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
