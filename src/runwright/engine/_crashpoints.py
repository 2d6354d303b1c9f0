"""Named crash points: places in the engine where a test can make a process fail on purpose.

Off unless armed, and then cheap (one dict lookup). Armed in-process with `arm(name,
action)`, or for a worker subprocess with RUNWRIGHT_CRASH_POINTS="name=action,...". The
step points can be narrowed to one step: `step.after_side_effect:charge` fires only at
the step named `charge`.
Actions: `raise` (an unexpected error right there), `kill` (SIGKILL this process),
`stop` (SIGSTOP this process: a stall). Points in the engine:

    worker.claim_loop          before each claim
    worker.after_claim         runs claimed (fence bumped), none started yet
    step.after_started_mark    an at-most-once step's "started" mark is durable; no call yet
    step.after_side_effect     a step's function returned; its journal write not yet made
    step.after_journal         a step's journal write is durable; the task not yet resumed
    child.after_insert         a child run is inserted (`ctx.submit`); its journal entry not yet made
    signal.after_take          `ctx.wait_signal` or `take_signal` took its signal (`ctx.wait_event`'s
                               delivery: detail `event:<name>`); no journal entry yet (but on
                               PostgreSQL, where a wait_signal's take writes its entry too)
    steer.after_absorb         an agent put a steered message in its thread; its follower not yet ended
    worker.before_finish       a run's function returned; its terminal write not yet made
    schedule.after_insert      a schedule's fire inserted its runs; its next fire time not yet moved
    sweep.before_collect       a retention pass removed its rows; the blobs they named not yet collected
"""

from __future__ import annotations

import os
import signal

from ..errors import InvalidInput

__all__ = ["CrashPointReached", "arm", "crash_point", "disarm"]

ACTIONS = ("raise", "kill", "stop")


class CrashPointReached(RuntimeError):
    """Raised at an armed crash point whose action is `raise`."""


def _from_env() -> dict[str, str]:
    armed = {}
    for item in filter(None, os.environ.get("RUNWRIGHT_CRASH_POINTS", "").split(",")):
        name, _, action = item.partition("=")
        armed[name.strip()] = action.strip() or "raise"
    return armed


_armed: dict[str, str] = _from_env()


_remaining: dict[str, int] = {}


def arm(name: str, action: str = "raise", times: int | None = None) -> None:
    """Arm a point; with `times`, it disarms itself after firing that many times."""
    if action not in ACTIONS:
        raise InvalidInput(f"crash point action must be one of {ACTIONS}, got {action!r}")
    _armed[name] = action
    if times is not None:
        _remaining[name] = times


def disarm(name: str | None = None) -> None:
    """Disarm one point, or all of them."""
    if name is None:
        _armed.clear()
        _remaining.clear()
    else:
        _armed.pop(name, None)
        _remaining.pop(name, None)


def crash_point(name: str, detail: str = "") -> None:
    """Fire `name` if armed, or `name:detail` (e.g. `step.after_side_effect:tool:pay`,
    which fires only at the step named `tool:pay`)."""
    if not _armed:
        return
    key = name if name in _armed else f"{name}:{detail}"
    action = _armed.get(key)
    if action is None:
        return
    if key in _remaining:
        _remaining[key] -= 1
        if _remaining[key] <= 0:
            disarm(key)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        raise CrashPointReached(f"crash point {name!r} reached")
