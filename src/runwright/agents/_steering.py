"""Steering: a message for a thread's running agent, taken in at its next model call.

`submit(agent, input=..., thread=t, on_busy="steer")` writes the message as a run (the
follower), enqueued behind the thread's open run as `enqueue` would, and then, when that
open run is a started run of the same agent task and nothing else waits between them,
signals it (`STEER_SIGNAL`, payload `{"run": follower id, "input": text}`).

The running agent, before each model call (where every tool call of the last reply has
its result, so a user message there keeps the history valid for any provider), takes its
pending steers without waiting (`ctx.take_signal`: journaled, fenced, once), keeps those
whose follower still waits (a journaled check: a follower a person cancelled withdrew its
message; one that ran delivered it itself), and for each:

1. appends the message to its conversation and to the thread, marked with the follower's
   id (`STEERED_FROM`; fenced, under its index in the run: a replayed append is a no-op),
2. logs `steered` `{"from_run": F}` (once),
3. cancels the follower with the reason "delivered into run N" (a no-op once it ended).

The thread append is the delivery: it is the one write that decides. So the follower
never runs after its message was absorbed (step 3; and should the agent's run end between
1 and 3 without being resumed, the follower, given its turn, finds its mark in the
history and ends at once, adding nothing: `delivered_into`), and a message never absorbed
(the agent ended first, or was not steerable) runs as the thread's next run. Runs of a
thread never overlap, so the follower cannot start while the agent that may absorb it is
open. A crash anywhere in 1-3 replays them: the take returns the same signal, the append
and the event are not repeated, the cancel of an ended run is ignored.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Sequence

from ..core._resilience import through_blinks
from ..engine._crashpoints import crash_point
from ..errors import RunEnded, RunNotFound, SignalsFull
from ..runs import RunState
from ..store._params import RunCancelParams, RunListParams, SignalListParams, SignalSendParams

if TYPE_CHECKING:
    from ..engine._context import Context
    from ..runs import Run
    from ..store._interface import Store

__all__ = ["INPUT_ARGUMENTS", "STEERED_FROM", "STEER_SIGNAL", "Delivered", "Steer", "absorbed",
           "delivered_into", "end_follower", "for_model", "signal_open_run", "take_steers"]

STEER_SIGNAL = "runwright.steer"
STEERED_FROM = "steered_from"  # the key of a steered message's mark in the thread: the follower's id
OPEN = (RunState.QUEUED, RunState.RUNNING)
# The text argument of an agent's task: runwright's and the SDK adapter's `input`, the
# Pydantic AI adapter's `prompt`.
INPUT_ARGUMENTS = ("input", "prompt")


class Delivered(Exception):
    """This run's input was steered into the run before it on its thread, which took it in
    and ended before it could end this one: the message is in the thread already, and this
    run adds nothing. The adapters' registered tasks return None for it; a task of yours
    running an adapter's agent itself may do the same."""


class Steer:
    """One steer taken by a running agent: the follower run and its message."""

    __slots__ = ("input", "run_id")

    def __init__(self, run_id: int, input: str) -> None:
        self.run_id = run_id
        self.input = input

    def message(self) -> dict[str, Any]:
        """The user message as the thread keeps it (marked with its follower)."""
        return {"role": "user", "content": self.input, STEERED_FROM: self.run_id}


async def signal_open_run(store: Store, follower: Run) -> int | None:
    """After `follower` was enqueued with on_busy="steer": signal the thread's open run
    when it is a started run of the same task with nothing else waiting before the
    follower but runs steered to it already (so the message keeps its place in the
    thread's order); None when there is
    none, or it ended meanwhile (then the follower just runs next). Returns its id."""
    if follower.thread is None or follower.existed:
        return None
    try:
        arguments = follower.arguments()
    except ValueError:
        return None
    texts = [arguments.get(name) for name in INPUT_ARGUMENTS if isinstance(arguments, dict)]
    text = next((t for t in texts if isinstance(t, str)), None)
    if text is None:
        return None
    runs = await through_blinks(store.run_list, RunListParams(
        states=OPEN, thread=follower.thread, tenant=follower.tenant, limit=100))
    before = sorted((r for r in runs if r.id < follower.id), key=lambda r: r.id)
    if not before:
        return None
    current, *between = before
    begun = current.state is RunState.RUNNING or current.started_at is not None
    if current.task != follower.task or not begun:  # not an agent of this task, or not started
        return None
    if between:  # only runs steered to it already may wait between: the message keeps its place
        sent = await through_blinks(store.signal_list, SignalListParams(current.id, limit=1000))
        steered = {s.payload.get("run") for s in sent
                   if s.name == STEER_SIGNAL and isinstance(s.payload, dict)}
        if any(r.id not in steered for r in between):
            return None
    try:
        await through_blinks(store.signal_send, SignalSendParams(
            current.id, STEER_SIGNAL, json.dumps({"run": follower.id, "input": text}),
            key=f"steer:{follower.id}"))
    except (RunEnded, RunNotFound, SignalsFull):
        return None
    return current.id


async def take_steers(ctx: Context) -> list[Steer]:
    """The steers sent to this run and not taken yet, each taken once (journaled), that
    are still this run's to deliver (`_still_waiting`, journaled too)."""
    if ctx.run.thread is None:
        return []
    steers = []
    while (taken := await ctx.take_signal(STEER_SIGNAL)) is not None:
        payload = taken["payload"]
        steer = Steer(int(payload["run"]), str(payload["input"]))
        if await ctx.step("steer:deliver", _still_waiting, ctx, steer.run_id):
            steers.append(steer)
    return steers


async def _still_waiting(ctx: Context, follower_id: int) -> bool:
    """Whether the follower's message is this run's to deliver: the follower waits (it
    cannot start while this run is open), or this run delivered it already. Not when the
    follower was cancelled by a person (the message withdrawn) or has run: a run retried
    by hand after it failed with a steer taken but not journaled (the follower then ran
    the message itself) must not deliver it again. Journaled: the same answer on every
    replay, whatever becomes of the follower."""
    found = await through_blinks(ctx.runtime.store.run_get, follower_id)
    if found is None:
        return False
    if found.state is RunState.QUEUED and found.started_at is None:
        return True
    error = found.error_info() or {}
    return found.state is RunState.CANCELLED and error.get("message") == _delivered_into(ctx.run_id)


def _delivered_into(run_id: int) -> str:
    return f"delivered into run {run_id}"


async def absorbed(ctx: Context, steer: Steer) -> None:
    """After the steered message went to the thread: its `steered` event (logged once),
    then its follower ends unrun. Made again on a replay: nothing more."""
    await ctx.emit("steered", {"from_run": steer.run_id})
    crash_point("steer.after_absorb")
    await end_follower(ctx, steer)


async def end_follower(ctx: Context, steer: Steer) -> None:
    """The follower's message is in the thread: it ends without running (cancelled,
    "delivered into run N"). Made again on a replay, or once it ended: nothing."""
    if ctx.dry:  # a dry replay (`runwright replay`) writes nothing
        return
    store = ctx.runtime.store
    found = await through_blinks(store.run_get, steer.run_id)
    if found is None or found.done:
        return
    try:
        await through_blinks(store.run_cancel, RunCancelParams(
            steer.run_id, reason=_delivered_into(ctx.run_id)))
    except (RunEnded, RunNotFound):
        return


def delivered_into(history: Sequence[Any], run_id: int) -> bool:
    """Whether this run's message is already in its thread's history (a steer absorbed by
    the run before it, which ended before it could end this one)."""
    return any(isinstance(m, dict) and m.get(STEERED_FROM) == run_id for m in history)


def for_model(messages: list[Any]) -> list[Any]:
    """The messages as a provider takes them: a steered message without its mark."""
    def marked(m: Any) -> bool:
        return isinstance(m, dict) and STEERED_FROM in m

    if not any(marked(m) for m in messages):
        return messages
    return [{k: v for k, v in m.items() if k != STEERED_FROM} if marked(m) else m for m in messages]
