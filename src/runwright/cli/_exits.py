"""The exit codes of `runwright`, one meaning each, and the one place errors become them.

A script can tell "the run failed" from "the database is down" from "no such run" by the
code alone; the table is printed at the end of `runwright --help` and in the README.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import typer

from ..errors import (
    ConfigError,
    DeploymentMoved,
    InvalidInput,
    InvalidTransition,
    KeyConflict,
    QuestionNotFound,
    RunNotFound,
    SchemaError,
    SignalsFull,
    SingletonTaken,
    StoreError,
    StoreUnreachable,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
    UpdateTimeout,
)
from ..observe._logs import event
from ._output import escape, lazy_console

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["ADDRESS_IN_USE", "BAD_INPUT", "FAILED", "INTERRUPTED", "MOVED", "NOT_FOUND", "NO_FLEET",
           "NO_SCHEMA", "OK", "STORE_UNREACHABLE", "TABLE", "TIMED_OUT", "clear_errors", "code_for", "err",
           "fail"]

OK = 0
FAILED = 1
BAD_INPUT = 2
STORE_UNREACHABLE = 3
NO_SCHEMA = 4
NOT_FOUND = 5
TIMED_OUT = 6
ADDRESS_IN_USE = 7
NO_FLEET = 8
MOVED = 9
INTERRUPTED = 130  # the shells' 128 + SIGINT

TABLE = [
    (OK, "success"),
    (FAILED, "a run ended without success (submit --wait, follow), a worker crashed, replay found "
             "a run the code would break, or move --check found a difference"),
    (BAD_INPUT, "bad input or setting: usage, JSON, a task, a time, an ended run, a busy thread, a key "
                "that names a run submitted otherwise, --decode or --operator-decode without the payload "
                "keys"),
    (STORE_UNREACHABLE, "the store cannot be reached"),
    (NO_SCHEMA, "no database, a schema not migrated (run `runwright migrate`), or a newer one"),
    (NOT_FOUND, "no such run, question or thread (a run retention reclaimed: RunExpired); an unknown "
               "schedule name is bad input (2)"),
    (TIMED_OUT, "submit --wait --timeout-s: the run did not end in time (it goes on)"),
    (ADDRESS_IN_USE, "serve, mcp --http: cannot listen there (the port is in use, or not allowed)"),
    (NO_FLEET, "verify --fleet: no running worker of the fleet took verify's session"),
    (MOVED, "the store is sealed by `runwright move` or is its tombstone: the line names the store the "
            "deployment moves or moved to"),
    (INTERRUPTED, "verify: interrupted by SIGINT or SIGTERM (its place and processes removed)"),
]

# The most specific kind first: SchemaError and StoreUnreachable are both StoreErrors.
EXIT_FOR: list[tuple[type[Exception], int]] = [
    (DeploymentMoved, MOVED),
    (SchemaError, NO_SCHEMA), (StoreUnreachable, STORE_UNREACHABLE), (StoreError, STORE_UNREACHABLE),
    (RunNotFound, NOT_FOUND), (QuestionNotFound, NOT_FOUND), (ThreadNotFound, NOT_FOUND),
    (ThreadDeleted, NOT_FOUND),
    (InvalidInput, BAD_INPUT), (ConfigError, BAD_INPUT), (InvalidTransition, BAD_INPUT),
    (ThreadBusy, BAD_INPUT), (KeyConflict, BAD_INPUT), (SingletonTaken, BAD_INPUT), (SignalsFull, BAD_INPUT),
    (UpdateTimeout, TIMED_OUT),
]

def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)  # one error, one line, even in a pipe


err = lazy_console(_stderr)


def fail(message: str, code: int) -> typer.Exit:
    """Print `error: message` on stderr; the Exit to raise with `code`."""
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def code_for(exc: Exception) -> int:
    """The exit code of one of runwright's errors (one of EXIT_FOR's kinds)."""
    return next(code for kind, code in EXIT_FOR if isinstance(exc, kind))


@contextmanager
def clear_errors() -> Iterator[None]:
    """Turn runwright's errors into one clear line and their exit code, not a traceback."""
    try:
        yield
    except tuple(kind for kind, _ in EXIT_FOR) as exc:
        # Where it came from, for whoever asks for it (RUNWRIGHT_LOG_LEVEL=DEBUG): the line
        # below is all a user sees otherwise.
        event(logging.DEBUG, "the command failed", exc_info=exc)
        raise fail(f"{type(exc).__name__}: {escape(str(exc))}", code_for(exc)) from None
