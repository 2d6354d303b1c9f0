"""The Context a task receives: who it is (run, attempt, fence, worker) and its App."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .runs import Run

if TYPE_CHECKING:
    from .app import App

__all__ = ["Context"]


@dataclass(slots=True)
class Context:
    """Given to a task whose first parameter is `ctx` (or annotated `rw.Context`)."""

    app: App
    run: Run
    worker_id: int

    @property
    def run_id(self) -> int:
        return self.run.id

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def attempt(self) -> int:
        """1 for the first attempt; a takeover continues the same attempt number."""
        return self.run.attempt

    @property
    def fence(self) -> int:
        """The claim's token: every write of this attempt carries it."""
        return self.run.fence
