"""Two versions of one app, as a rolling upgrade runs them side by side on one database:
`old` (1.4.0) and `new` (2.0.0), each with the task `work`. Loaded by worker processes as
`tests.process.upgrade_apps:old` or `:new`.

`work` leaves a ledger line per execution (see apps.note) and returns the version of the
worker that executed it, so a test can tell which major ran each run.
"""

from __future__ import annotations

import asyncio
import os

import runwright as rw

from .apps import note

OLD_VERSION, NEW_VERSION = "1.4.0", "2.0.0"

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
old = rw.App(version=OLD_VERSION)
new = rw.App(version=NEW_VERSION)


def _work(app: rw.App) -> None:
    @app.task(name="work", retries=0)
    async def work(ctx: rw.Context, n: int) -> dict[str, object]:
        note("ran", ctx)
        await asyncio.sleep(0.01)  # in flight a while, so a drain meets some runs running
        return {"n": n, "version": app.version, "pid": os.getpid()}


_work(old)
_work(new)
