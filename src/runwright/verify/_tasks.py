"""`runwright verify`'s workload: the tasks its workers execute, each leaving a trace of
its side effects in a ledger the checks read.

They are runwright's own code, registered in every App with the built-in jobs (see
`hooks`), so that with `verify --fleet` the user's running workers can execute them, on
the queue of one verify session they serve while told to (see `serving`).

The ledger is one line per side effect, written before the effect counts, so a SIGKILL
right after cannot lose it:

    step   <run_id> <name> <fence> <token>    a journaled step's function ran (token: unique)
    once   <run_id> <fence> <token>           the at-most-once step's function ran

Where it is written: verify's own workers are local processes, so a directory
(RUNWRIGHT_VERIFY_LEDGER, one file per process, each line written and closed). The
fleet's workers may be on other machines: each run carries `ledger` = [run id, fence] of
a ledger run that verify holds, and a line is an event appended to that run's log (an
append is fenced by the ledger run's claim, which verify keeps, not by the writer's: a
zombie's execution is recorded too). A line repeated by a retried append has the same
token, so it counts once.

A step's function returns its token and fence: the journal then tells which execution
committed, so the checks can tell a re-execution after that commit from an execution whose
worker died before its journal write. Each step is followed by a `progress` event carrying
the writer's fence, which lets the checks see a zombie's write in the event log.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import TYPE_CHECKING, Any

from ..core._resilience import through_blinks
from ..engine._context import Context
from ..errors import OutcomeUnknown
from ..store._params import EventAppendParams

if TYPE_CHECKING:
    from ..tasks._registry import Registry

__all__ = ["CHILD_TASK", "LEDGER_ENV", "LEDGER_EVENT", "LEDGER_TASK", "LedgerClosed", "QUEUE",
           "RUN_TASK", "TASKS", "register_tasks"]

LEDGER_ENV = "RUNWRIGHT_VERIFY_LEDGER"
QUEUE = "verify"  # its own queue: a fleet's workers of other apps never see these runs
RUN_TASK = "runwright.verify_run"
CHILD_TASK = "runwright.verify_child"
LEDGER_TASK = "runwright.verify_ledger"  # the run whose log is the ledger (--fleet); never run
TASKS = (RUN_TASK, CHILD_TASK, LEDGER_TASK)
LEDGER_EVENT = "ledger"
WORK_S = (0.005, 0.03)  # each step's work: long enough for faults to land mid-step


class LedgerClosed(RuntimeError):
    """The ledger run's claim was superseded: verify is gone, nothing must run untraced."""


async def _note(ctx: Context, ledger: list[int] | None, line: str) -> None:
    if ledger is None:
        with open(os.path.join(os.environ[LEDGER_ENV], f"{os.getpid()}.log"), "a") as out:
            out.write(line + "\n")
        return
    appended = await through_blinks(ctx.runtime.store.event_append, EventAppendParams(
        int(ledger[0]), int(ledger[1]), [(LEDGER_EVENT, json.dumps({"line": line}))]))
    if appended is None:
        raise LedgerClosed(f"verify's ledger run {ledger[0]} is no longer held")


async def _effect(ctx: Context, name: str, ledger: list[int] | None) -> dict[str, Any]:
    """A step's side effect: the ledger line comes first, then the work, so a kill during
    the work leaves an execution that the journal never saw (allowed: it was not done)."""
    token = os.urandom(16).hex()
    await _note(ctx, ledger, f"step {ctx.run_id} {name} {ctx.fence} {token}")
    await asyncio.sleep(random.uniform(*WORK_S))
    return {"token": token, "fence": ctx.fence}


async def _once(ctx: Context, ledger: list[int] | None) -> int:
    await _note(ctx, ledger, f"once {ctx.run_id} {ctx.fence} {os.urandom(16).hex()}")
    await asyncio.sleep(random.uniform(*WORK_S))
    return ctx.fence


async def verify_run(ctx: Context, n: int, steps: int, sleep_s: float = 0.0, child: bool = False,
                     ledger: list[int] | None = None) -> int:
    """`steps` journaled steps (each followed by a fenced `progress` event), an
    at-most-once step, optionally a durable sleep and a child run (on this run's queue);
    returns `n`."""
    for i in range(steps):
        await ctx.step(f"step-{i}", _effect, ctx, f"step-{i}", ledger)
        await ctx.emit("progress", {"step": i, "fence": ctx.fence})
    try:
        await ctx.step("once", _once, ctx, ledger, at_most_once=True)
    except OutcomeUnknown:
        pass  # its worker died mid-call: being at-most-once, it is not made again
    if sleep_s > 0:
        await ctx.sleep(sleep_s)
    if child:  # parks until the child ends
        await (await ctx.submit(CHILD_TASK, n=n, ledger=ledger, queue=ctx.run.queue))
    return n


async def verify_child(ctx: Context, n: int, ledger: list[int] | None = None) -> int:
    """A child run: one journaled step and its progress event."""
    await ctx.step("child-step", _effect, ctx, "child-step", ledger)
    await ctx.emit("progress", {"step": 0, "fence": ctx.fence})
    return n


async def verify_ledger() -> None:
    """The ledger run's task: verify claims that run itself and never runs it."""


def register_tasks(registry: Registry) -> None:
    """Verify's workload, in every App (as the built-in jobs). Takeovers do not use
    attempts; `retries` only covers a step that a cut connection made fail."""
    registry.task(name=RUN_TASK, retries=5, queue=QUEUE)(verify_run)
    registry.task(name=CHILD_TASK, retries=5, queue=QUEUE)(verify_child)
    registry.task(name=LEDGER_TASK, retries=0, queue=QUEUE)(verify_ledger)
