"""One task, `errand`, at the versions of a deploy made under runs in flight
(test_patch_upgrades.py), each an App that worker processes or `runwright replay` load:

- `old` (version N, 3.1.0): fetch, lookup_v1, finish;
- `new` (N+1, 3.2.0): the lookup changed to `lookup_v2` and an `audit` step added after
  it, both behind `ctx.patched("lookup-v2")`, the old steps kept in the else branch;
- `unpatched` (N+1 as a careless deploy writes it): the same change without the guard.

One major (3): N+1 workers claim the runs N submitted, as a minor upgrade does.

An errand waits once, either before the changed point (stage "early") or after it
("late"), in one of three ways: a durable sleep ("sleep"), a person's answer ("ask"), or a
long step ("long"). A test ends the waits: the answers it gives, and the `wake` file in the
ledger directory, which ends the sleeps (each polls it in a step between durable sleeps)
and the long steps. The errand returns the path it took ("old" or "new"); each step's
execution leaves a ledger line (apps.note) named after the step.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import runwright as rw

from .apps import HOLD_LIMIT_S, ledger_dir, note

OLD_VERSION, NEW_VERSION = "3.1.0", "3.2.0"
PATCH = "lookup-v2"
WAITS = ("sleep", "ask", "long")
STAGES = ("early", "late")
POLL_S = 2.0  # a sleeper's durable sleep between looks at the wake file: it parks (no slot)


def wake_file() -> Path:
    return ledger_dir() / "wake"


def _executed(ctx: rw.Context, name: str) -> str:
    note(name, ctx)
    return name


def _awake(ctx: rw.Context) -> bool:
    note("awake?", ctx)
    return os.path.exists(wake_file())


async def _long_work(ctx: rw.Context) -> str:
    """The long step: in flight until the wake file appears (asynchronously, so a drain
    that gives the run back can stop it; it runs again on the next worker)."""
    note("work", ctx)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not os.path.exists(wake_file()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return "worked"


async def _wait(ctx: rw.Context, wait: str, n: int) -> None:
    if wait == "sleep":
        while not await ctx.step("awake?", _awake, ctx):
            await ctx.sleep(POLL_S)
    elif wait == "ask":
        assert await ctx.ask(f"go on with errand {n}?", schema=bool) is True
    else:
        await ctx.step("work", _long_work, ctx)


def _version(version: str, change: str) -> rw.App:
    # RUNWRIGHT_URL is set by `runwright worker --url` (or `replay --url`) before this import.
    app = rw.App(version=version)

    @app.task(name="errand", retries=0)
    async def errand(ctx: rw.Context, n: int, wait: str, stage: str) -> dict[str, object]:
        await ctx.step("fetch", _executed, ctx, "fetch")
        if stage == "early":
            await _wait(ctx, wait, n)
        if change == "unpatched" or (change == "patched" and await ctx.patched(PATCH)):
            await ctx.step("lookup_v2", _executed, ctx, "lookup_v2")
            await ctx.step("audit", _executed, ctx, "audit")
            path = "new"
        else:
            await ctx.step("lookup_v1", _executed, ctx, "lookup_v1")
            path = "old"
        if stage == "late":
            await _wait(ctx, wait, n)
        await ctx.step("finish", _executed, ctx, "finish")
        return {"n": n, "path": path, "version": app.version, "pid": os.getpid()}

    return app


old = _version(OLD_VERSION, "none")
new = _version(NEW_VERSION, "patched")
unpatched = _version(NEW_VERSION, "unpatched")
