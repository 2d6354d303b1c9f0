"""Verify in every App, registered through the hooks a user has: its workload's tasks
(`tasks`) on the registry, with the built-in jobs, and its fleet ops (`serving`) with
`fleet.on`, reserved as the built-in ops are. The App calls `register`; the engine and
the fleet know nothing of verify."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._serving import VerifyOps
from ._tasks import register_tasks

if TYPE_CHECKING:
    from ..fleet import Fleet
    from ..tasks._registry import Registry

__all__ = ["register"]


def register(registry: Registry, fleet: Fleet, *, workload: bool = True) -> None:
    """Verify's ops, and its workload unless `workload=False` (an App made with
    `builtin_jobs=False`): its workers then refuse a `verify --fleet` session, saying why."""
    if workload:
        register_tasks(registry)
    for op, handler in VerifyOps(fleet, registry).handlers().items():
        fleet.on(op, reserve=True)(handler)
