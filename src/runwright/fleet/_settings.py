"""The fleet's settings: its root, and the clocks of presence (heartbeat, freshness, TTL).

Each setting is read from the environment once, when the App is made; the boot rules
(`boot`) refuse a process whose environment changed since.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["DEFAULT_NAMESPACE", "FleetSettings"]

DEFAULT_NAMESPACE = "runwright"


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """How a fleet is named and how fast its presence moves.

    A row whose heartbeat is older than `stale_s` reads `stale`; one older than `ttl_s`
    is gone (its life ended, its slot free). A connection blip shorter than `ttl_s`
    keeps the life.
    """

    namespace: str = DEFAULT_NAMESPACE  # RUNWRIGHT_NAMESPACE. Defaults to "runwright".
    major: int = 0  # the app's declared major version (App(version=...)). Defaults to 0.
    heartbeat_s: float = 1.0  # RUNWRIGHT_FLEET_HEARTBEAT_S. Defaults to 1 s.
    stale_s: float = 3.0  # RUNWRIGHT_FLEET_STALE_S, the freshness gate. Defaults to 3 s.
    ttl_s: float = 10.0  # RUNWRIGHT_FLEET_TTL_S. Defaults to 10 s.
    # RUNWRIGHT_FLEET_APPLY_WINDOW_S: how long a rolling recycle waits for one target to
    # converge (drain, exit, a new life ready). Defaults to 60 s.
    apply_window_s: float = 60.0
    broadcast_timeout_s: float = 5.0  # a broadcast's window when none is given. Defaults to 5 s.

    def __post_init__(self) -> None:
        if not self.namespace or not all(c.isalnum() or c in "_-." for c in self.namespace):
            raise ConfigError(f"RUNWRIGHT_NAMESPACE must be letters, digits, '_', '-' or '.', "
                              f"got {self.namespace!r}")
        if not 0 < self.heartbeat_s < self.stale_s < self.ttl_s:
            raise ConfigError(
                f"fleet clocks must grow: RUNWRIGHT_FLEET_HEARTBEAT_S ({self.heartbeat_s}) < "
                f"RUNWRIGHT_FLEET_STALE_S ({self.stale_s}) < RUNWRIGHT_FLEET_TTL_S ({self.ttl_s})")

    @property
    def root(self) -> str:
        """Every key and channel of the fleet is under this: `{namespace}:v{major}`."""
        return f"{self.namespace}:v{self.major}"

    @classmethod
    def from_env(cls, major: int) -> FleetSettings:
        return cls(namespace=os.environ.get("RUNWRIGHT_NAMESPACE") or DEFAULT_NAMESPACE, major=major,
                   heartbeat_s=_seconds("RUNWRIGHT_FLEET_HEARTBEAT_S", 1.0),
                   stale_s=_seconds("RUNWRIGHT_FLEET_STALE_S", 3.0),
                   ttl_s=_seconds("RUNWRIGHT_FLEET_TTL_S", 10.0),
                   apply_window_s=_seconds("RUNWRIGHT_FLEET_APPLY_WINDOW_S", 60.0),
                   broadcast_timeout_s=_seconds("RUNWRIGHT_FLEET_TIMEOUT_S", 5.0))


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {raw!r}")
    return value
