"""Named crash points: places in the engine where a test can make a process fail on purpose.

Off unless armed, and then cheap (one dict lookup). Armed in-process with `arm(name,
action)`, or for a worker subprocess with RUNWRIGHT_CRASH_POINTS="name=action,...".
Actions: `raise` (an unexpected error right there), `kill` (SIGKILL this process),
`stop` (SIGSTOP this process: a stall). Points in the engine:

    worker.claim_loop          before each claim
    worker.after_claim         runs claimed (fence bumped), none started yet
    step.after_side_effect     a step's function returned; its journal write not yet made
    step.after_journal         a step's journal write is durable; the task not yet resumed
    worker.before_finish       a run's function returned; its terminal write not yet made
"""

from __future__ import annotations

import os
import signal

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


def arm(name: str, action: str = "raise") -> None:
    if action not in ACTIONS:
        raise ValueError(f"crash point action must be one of {ACTIONS}, got {action!r}")
    _armed[name] = action


def disarm(name: str | None = None) -> None:
    """Disarm one point, or all of them."""
    if name is None:
        _armed.clear()
    else:
        _armed.pop(name, None)


def crash_point(name: str) -> None:
    action = _armed.get(name) if _armed else None
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        raise CrashPointReached(f"crash point {name!r} reached")
