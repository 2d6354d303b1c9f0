"""Parking and interruption: how a run gives its slot back while it waits (a durable
timer, a child), and how it stops when a newer run on its thread interrupts it.

`Park` unwinds the task's function like an exception; the executor turns it into a
fenced give-back with a later run_at, so any worker resumes the run when it comes due,
by replaying its journal. It derives from BaseException so that a task's own
`except Exception:` cannot swallow it.
"""

from __future__ import annotations

import asyncio

from ..runs import WaitReason

__all__ = ["Interrupted", "Park", "Paused", "RunControl"]


class Park(BaseException):
    """`waits_on` is what the run's lists show (a WaitReason the store keeps); `reason`
    says more in its log."""

    def __init__(self, until: float, reason: str, waits_on: WaitReason) -> None:
        super().__init__(f"parked until {until} ({reason})")
        self.until = until
        self.reason = reason
        self.waits_on = waits_on


class Interrupted(BaseException):
    """A newer run on the thread asked this one to stop at its next step boundary; the
    executor ends it `interrupted`. `mode` is "interrupt" or "rollback"."""

    def __init__(self, mode: str) -> None:
        super().__init__(f"interrupted ({mode}) by a newer run on its thread")
        self.mode = mode


class Paused(BaseException):
    """The run was asked to pause (`app.pause`): at its next step boundary it stops, and
    the executor gives its slot back, the run held until a resume."""

    def __init__(self) -> None:
        super().__init__("paused at a step boundary, on request")


class RunControl:
    """What the worker learns about a live run while it executes (set by its watcher,
    read by the run's Context at step boundaries)."""

    __slots__ = ("_interrupted", "interrupt", "pause", "stopping")

    def __init__(self, interrupt: str | None = None) -> None:
        self.interrupt = interrupt
        self.pause = False  # asked to pause: honoured at its next step boundary
        self.stopping = False  # the worker asked the run to stop (cancel, lease lost, shutdown)
        self._interrupted: asyncio.Event | None = None

    def request_interrupt(self, mode: str) -> None:
        """A newer run on the thread asked this one to stop: honoured at its next step
        boundary, and at once by what it awaits through `Context.interruptible`."""
        self.interrupt = mode
        if self._interrupted is not None:
            self._interrupted.set()

    async def wait_interrupt(self) -> str:
        """Until an interrupt is requested; its mode."""
        if self.interrupt is None:
            if self._interrupted is None:
                self._interrupted = asyncio.Event()
            await self._interrupted.wait()
        assert self.interrupt is not None
        return self.interrupt
