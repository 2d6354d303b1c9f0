"""The verify app (`runwright.verify.workload:app`): the tasks that `runwright verify`'s
workers execute, each leaving a trace of its side effects in a ledger the checks read.

The ledger is a directory (RUNWRIGHT_VERIFY_LEDGER; the workers are local processes), one
file per process, one line per side effect, written and closed before the effect counts,
so a SIGKILL right after cannot lose it:

    step   <run_id> <name> <fence> <token>    a journaled step's function ran (token: unique)
    once   <run_id> <fence>                   the at-most-once step's function ran

A step's function returns its token and fence: the journal then tells which execution
committed, so the checks can tell a re-execution after that commit from an execution whose
worker died before its journal write. Each step is followed by a `progress` event carrying
the writer's fence, which lets the checks see a zombie's write in the event log.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import uuid
from typing import Any

from ..app import App
from ..context import Context
from ..errors import OutcomeUnknown

__all__ = ["APP_SPEC", "LEDGER_ENV", "QUEUE", "verify_app"]  # and `app`, built on first use

APP_SPEC = "runwright.verify.workload:app"
LEDGER_ENV = "RUNWRIGHT_VERIFY_LEDGER"
QUEUE = "verify"  # its own queue: a fleet's workers of other apps never see these runs
WORK_S = (0.005, 0.03)  # each step's work: long enough for faults to land mid-step


def _note(line: str) -> None:
    with open(os.path.join(os.environ[LEDGER_ENV], f"{os.getpid()}.log"), "a") as out:
        out.write(line + "\n")


async def _effect(ctx: Context, name: str) -> dict[str, Any]:
    """A step's side effect: the ledger line comes first, then the work, so a kill during
    the work leaves an execution that the journal never saw (allowed: it was not done)."""
    token = uuid.uuid4().hex
    _note(f"step {ctx.run_id} {name} {ctx.fence} {token}")
    await asyncio.sleep(random.uniform(*WORK_S))
    return {"token": token, "fence": ctx.fence}


async def _once(ctx: Context) -> int:
    _note(f"once {ctx.run_id} {ctx.fence}")
    await asyncio.sleep(random.uniform(*WORK_S))
    return ctx.fence


async def verify_run(ctx: Context, n: int, steps: int, sleep_s: float = 0.0, child: bool = False) -> int:
    """`steps` journaled steps (each followed by a fenced `progress` event), an
    at-most-once step, optionally a durable sleep and a child run; returns `n`."""
    for i in range(steps):
        await ctx.step(f"step-{i}", _effect, ctx, f"step-{i}")
        await ctx.emit("progress", {"step": i, "fence": ctx.fence})
    try:
        await ctx.step("once", _once, ctx, at_most_once=True)
    except OutcomeUnknown:
        pass  # its worker died mid-call: being at-most-once, it is not made again
    if sleep_s > 0:
        await ctx.sleep(sleep_s)
    if child:
        await (await ctx.submit("verify_child", n=n))  # parks until the child ends
    return n


async def verify_child(ctx: Context, n: int) -> int:
    """A child run: one journaled step and its progress event."""
    await ctx.step("child-step", _effect, ctx, "child-step")
    await ctx.emit("progress", {"step": 0, "fence": ctx.fence})
    return n


def verify_app(url: str | None = None) -> App:
    """An App on `url` (else RUNWRIGHT_URL) with the verify tasks, on verify's own queue.
    Takeovers do not use attempts; `retries` only covers a step that a cut connection
    made fail."""
    app = App(url)
    app.task(retries=5, queue=QUEUE)(verify_run)
    app.task(retries=5, queue=QUEUE)(verify_child)
    return app


@functools.cache
def _worker_app() -> App:
    return verify_app()


def __getattr__(name: str) -> App:
    """`app`, built on first use: importing this module reads no store URL until a
    worker loads `runwright.verify.workload:app`."""
    if name == "app":
        return _worker_app()
    raise AttributeError(name)
