"""Boot rules: a process refuses to join a fleet in a shape that cannot converge, and
names the setting to fix. Each raises ConfigError (exit code 2 from the CLI).

Shapes no rule here can see are listed in the README (a clock far off on a machine
that judges nothing, two deployments sharing a namespace and a major on purpose, ...).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ..errors import ConfigError
from ..store._interface import Store
from ..store._liveness import hostname_of
from ._settings import FleetSettings

__all__ = ["DRAIN_BUDGETS", "StartingShape", "check_apply_window", "check_one_host", "check_unchanged"]

# A recycle's apply window holds at least this many drain budgets of its targets.
DRAIN_BUDGETS = 3

# A SQLite worker row fresher than this is a live process (the SQLite store's own
# staleness default, WorkerConfig.worker_stale_s).
SQLITE_LIVE_S = 15.0


@dataclass(frozen=True, slots=True)
class StartingShape:
    """The settings the App was made with, read from the environment then."""

    namespace: str | None
    url: str | None  # RUNWRIGHT_URL when the App took its URL from it, else None

    @classmethod
    def now(cls, url_from_env: bool) -> StartingShape:
        return cls(os.environ.get("RUNWRIGHT_NAMESPACE"),
                   os.environ.get("RUNWRIGHT_URL") if url_from_env else None)


def check_apply_window(settings: FleetSettings, drain_s: float) -> None:
    """A recycle waits `apply_window_s` for a target to drain, leave and come back ready:
    below DRAIN_BUDGETS drain budgets, a target that uses its drain cannot converge in time."""
    if settings.apply_window_s < DRAIN_BUDGETS * drain_s:
        raise ConfigError(
            f"RUNWRIGHT_FLEET_APPLY_WINDOW_S={settings.apply_window_s:g} is below {DRAIN_BUDGETS} drain "
            f"budgets ({DRAIN_BUDGETS} x --drain-grace-s {drain_s:g} = {DRAIN_BUDGETS * drain_s:g} s): a "
            f"recycle could not "
            f"converge; raise RUNWRIGHT_FLEET_APPLY_WINDOW_S or lower --drain-grace-s")


async def check_one_host(store: Store) -> None:
    """SQLite is one machine's store: live workers in its table on another host mean the
    file is shared over a network, where neither its locks nor the fleet's polling hold."""
    if not store.url.lower().startswith("sqlite"):
        return
    here = socket.gethostname()  # hosts, not pid namespaces: containers of one machine share it
    now = store.clock()
    elsewhere = sorted({hostname_of(w.host) for w in await store.worker_list()
                        if hostname_of(w.host) != here and now - w.heartbeat_at < SQLITE_LIVE_S})
    if elsewhere:
        raise ConfigError(
            f"RUNWRIGHT_URL={store.url} is a SQLite store with live workers on another host "
            f"({', '.join(elsewhere)}): SQLite serves one machine; point RUNWRIGHT_URL at "
            f"PostgreSQL or Redis for a fleet of several")


def check_unchanged(started: StartingShape) -> None:
    """The root and the store were fixed when the App was made; a process whose
    environment now says otherwise would report one fleet and serve another."""
    current = StartingShape.now(started.url is not None)
    for name, before, after in (("RUNWRIGHT_NAMESPACE", started.namespace, current.namespace),
                                ("RUNWRIGHT_URL", started.url, current.url)):
        if before != after:
            raise ConfigError(f"{name} changed at run time (from {before!r} to {after!r}); "
                              f"this process keeps the first: restart it with one {name}")
