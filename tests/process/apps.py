"""The app that worker subprocesses load as `tests.process.apps:app`.

Tasks leave a trace in a ledger directory (RUNWRIGHT_TEST_LEDGER, one file per process,
one line per event: `event run_id fence pid`), so a test can see every execution, not
only the one the store recorded. The `hold*` tasks block on their first start only (a
marker file per run records that start), which puts a run surely in flight for a test to
kill, stop or drain its worker; any later start returns at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import runwright as rw

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()

LEDGER_ENV = "RUNWRIGHT_TEST_LEDGER"
HOLD_LIMIT_S = 120.0  # a held run gives up waiting eventually, so nothing hangs forever


def ledger_dir() -> Path:
    return Path(os.environ[LEDGER_ENV])


def release_file(directory: Path, tag: str) -> Path:
    """Creating this file lets every held first start of runs tagged `tag` finish."""
    return directory / f"release-{tag}"


def note(event: str, ctx: rw.Context) -> None:
    """Append one ledger line; flushed on close, so a SIGKILL right after cannot lose it."""
    with open(ledger_dir() / f"{os.getpid()}.log", "a") as out:
        out.write(f"{event} {ctx.run_id} {ctx.fence} {os.getpid()}\n")


def first_start(ctx: rw.Context) -> bool:
    """True for the first start of this run in any process (O_EXCL makes it race-free)."""
    try:
        os.close(os.open(ledger_dir() / f"started-{ctx.run_id}", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@app.task(retries=0)
async def record(ctx: rw.Context, n: int) -> int:
    """A no-op that leaves one ledger line per execution."""
    note("ran", ctx)
    return n


@app.task(retries=0)
async def hold(ctx: rw.Context, tag: str) -> dict:
    """First start: wait (asynchronously, so it can be cancelled) for the release file."""
    note("start", ctx)
    if first_start(ctx):
        release = release_file(ledger_dir(), tag)
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not release.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    note("finished", ctx)
    return {"pid": os.getpid(), "fence": ctx.fence}


@app.task(retries=0)
def hold_sync(ctx: rw.Context, tag: str) -> str:
    """First start: block a thread until the release file appears. A thread cannot be
    cancelled, so a stalled worker's attempt surely reaches its `return` once it resumes,
    whether its worker then tries to write the result or has already abandoned the run;
    the "zombie-finished" line marks that moment."""
    note("start", ctx)
    if not first_start(ctx):
        note("finished", ctx)
        return f"from pid {os.getpid()}"
    release = release_file(ledger_dir(), tag)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    note("zombie-finished", ctx)
    return f"from pid {os.getpid()}"
