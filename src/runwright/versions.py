"""An app's declared version: a plain semantic version string (`2.4.0`).

Its major names the fleet the app's processes join (`{namespace}:v{major}`): two majors are
two fleets. Runs may later record it too; it stays a checked string, nothing more.
"""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = ["DEFAULT_VERSION", "check_version", "major_of"]

# An app that declares none is at 0.0.0: every such app is one fleet, major 0.
DEFAULT_VERSION = "0.0.0"
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")


def check_version(version: object) -> str:
    """`version` if it is a semantic version (MAJOR.MINOR.PATCH[-pre][+build]), else ConfigError."""
    if not isinstance(version, str) or not _SEMVER.match(version):
        raise ConfigError(f"version must be a semantic version such as '2.4.0', got {version!r}")
    return version


def major_of(version: str) -> int:
    return int(check_version(version).split(".", 1)[0])
