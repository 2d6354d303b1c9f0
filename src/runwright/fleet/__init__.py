"""The fleet bus: presence, slots with generations, and broadcasts with honest reports.

The bus itself is the store's: `store.bus(root)` (its interface, rows and messages in
`runwright.store._bus`; each backend's in `store/<backend>/bus.py`: postgres LISTEN/NOTIFY,
redis pub/sub, sqlite a polled table). The fleet never looks at which backend it is on.

    settings    the root `{namespace}:v{major}` and the clocks of presence
    presence    how rows read, which slot a new life takes, when a life departed
    broadcast   the outcomes of an op, one row per process
    member      this process's life: claim, heartbeat, states, handling ops
    recycle     the rolling recycle, confirmed by the census
    boot        the rules that refuse a shape that cannot converge
    cache       the process-local cache `evict-cache` evicts
    fleet       Fleet, the App's face of all this (`app.fleet`)
"""

from __future__ import annotations

from ._broadcast import Outcome, ReportRow
from ._cache import Cache
from ._fleet import BUILTIN_OPS, Fleet
from ._member import Member
from ._presence import Census, Life, Presence, State
from ._recycle import RecycleReport, RecycleStep
from ._settings import DEFAULT_NAMESPACE, FleetSettings

__all__ = [
    "BUILTIN_OPS",
    "DEFAULT_NAMESPACE",
    "Cache",
    "Census",
    "Fleet",
    "FleetSettings",
    "Life",
    "Member",
    "Outcome",
    "Presence",
    "RecycleReport",
    "RecycleStep",
    "ReportRow",
    "State",
]
