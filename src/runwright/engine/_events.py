"""`ctx.wait_event`: a wait for an event by name and match, built on the signal wait.

The wait takes journal positions as `ctx.wait_signal` does (a deadline's entry first when
it has a timeout, then the wait's own), registers itself (fenced) under the wait's
position before it waits, so that a publish finds it, and then waits, as a signal wait
does, for the signal a publish delivers to that position (`event:<position>`): the
signal's take is fenced and journaled, so the event's data is delivered once, and a
replay returns it. A wait that times out closes its registration first, and looks once
more: a publish that delivered in between wins over the timeout.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from ..core._events import check_event_name, check_match, wait_signal_name
from ..core._resilience import through_blinks
from ..errors import LeaseLost
from ..runs import WaitReason
from ..store._event_params import EventWaitCloseParams, EventWaitParams
from ..store._params import SignalTakeParams
from ..tasks._serde import encode
from ._crashpoints import crash_point
from ._parking import Park

if TYPE_CHECKING:
    from ..core._journal import StepRecord
    from ..runs import Run
    from ..store._params import SignalTaken
    from ._runtime import Runtime


class Waiting(Protocol):
    """What of the Context the wait uses (the Context itself: it calls `wait_event`)."""

    runtime: Runtime
    run: Run

    async def _next(self, name: str) -> tuple[int, StepRecord | None]: ...

    async def _record(self, position: int, name: str, status: str, result: str | None = None,
                      error: str | None = None) -> None: ...

    async def stop_if_interrupted(self, at_boundary: bool = True) -> None: ...

    async def _take_signal(self, position: int, name: str, until: float | None) -> SignalTaken: ...

    async def _deadline(self, step: str, timeout_s: float | None) -> float | None: ...


__all__ = ["EVENT_RECHECK_S", "EVENT_STEP", "Waiting", "wait_event"]

# A run waiting for an event is woken by the publish itself, in the same write; this
# re-check only bounds the wait if that wake-up were ever lost (and ends no timeout early).
EVENT_RECHECK_S = 3600.0
# The journal entry of a wait for event `name` is named EVENT_STEP + name.
EVENT_STEP = "event:"


async def wait_event(ctx: Waiting, name: str, match: Mapping[str, Any] | None,
                     timeout_s: float | None) -> Any:
    check_event_name(name)
    fits = check_match(match)
    match_json = encode(fits, f"the match of event {name!r}", ctx.runtime.limits.max_payload_bytes)
    until = await ctx._deadline(f"event-deadline:{name}", timeout_s)
    step = f"{EVENT_STEP}{name}"
    position, record = await ctx._next(step)
    if record is not None:
        return _outcome(name, record.value())
    await ctx.stop_if_interrupted()
    store, run = ctx.runtime.store, ctx.run
    registered = await through_blinks(store.event_wait, EventWaitParams(
        run.id, run.fence, position, name, match_json, run.tenant))
    if not registered:
        raise LeaseLost(run.id, run.fence)
    signal_name = wait_signal_name(position)
    taken = await ctx._take_signal(position, signal_name, until)
    if taken.signal is None and taken.owned and until is not None and ctx.runtime.clock() >= until:
        # Closed first, then looked at again: a delivery that came in between is taken.
        closing = EventWaitCloseParams(run.id, run.fence, position)
        if not await through_blinks(store.event_wait_close, closing):
            raise LeaseLost(run.id, run.fence)
        taken = await through_blinks(store.signal_take, SignalTakeParams(run.id, run.fence, position,
                                                                         signal_name))
        if taken.signal is None and taken.owned:
            outcome: dict[str, Any] = {"timeout": True}
            await ctx._record(position, step, "done", result=json.dumps(outcome))
            return _outcome(name, outcome)
    if not taken.owned:
        raise LeaseLost(run.id, run.fence)
    if taken.signal is None:
        recheck = ctx.runtime.clock() + EVENT_RECHECK_S
        raise Park(recheck if until is None else min(until, recheck), f"event {name!r}", WaitReason.SIGNAL)
    crash_point("signal.after_take", f"event:{name}")
    signal = taken.signal
    outcome = {"data": signal.payload, "event_id": _event_id(signal.key, position), "seq": signal.seq,
               "sent_at": signal.sent_at}
    await ctx._record(position, step, "done", result=json.dumps(outcome))
    return _outcome(name, outcome)


def _event_id(key: str | None, position: int) -> str | None:
    """The event's id, out of its delivery's key (`event:<id>:<position>`)."""
    suffix = f":{position}"
    if key is None or not key.startswith("event:") or not key.endswith(suffix):
        return None
    return key[len("event:"):-len(suffix)]


def _outcome(name: str, outcome: dict[str, Any]) -> Any:
    if outcome.get("timeout"):
        raise TimeoutError(f"no event {name!r} that fits the wait's match came within its timeout")
    return outcome["data"]
