"""What the engine is given: a registry, a store, a clock and the limits; never the App.

The App builds one and hands it to its workers; a test may build one around any store
and registry to drive the engine (a Worker, an attempt, a Context) without an App.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core._clock import Clock
from ..store._interface import Store
from ..tasks._limits import Limits
from ..tasks._registry import Registry
from ._journal_writer import JournalWriter

__all__ = ["Runtime"]


@dataclass(frozen=True, slots=True)
class Runtime:
    registry: Registry
    store: Store
    clock: Clock
    limits: Limits = field(default_factory=Limits)
    # The steps of the runs in flight, written together (see journal_writer).
    journal: JournalWriter = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "journal", JournalWriter(self.store))
