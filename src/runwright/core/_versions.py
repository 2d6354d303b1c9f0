"""An app's declared version, and the majors a task's code can run.

An app's version is a plain semantic version string (`2.4.0`). Its major names the fleet
the app's processes join (`{namespace}:v{major}`): two majors are two fleets. Every run
records the version of the app that submitted it, and a worker runs a run only when the
run's major is one its task can run: by default the worker's own major, else the task's
declared `versions=` (see `check_majors`).
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

from ..errors import ConfigError

__all__ = ["DEFAULT_VERSION", "check_majors", "check_version", "major_of"]

# An app that declares none is at 0.0.0: every such app is one fleet, major 0.
DEFAULT_VERSION = "0.0.0"
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
MAX_MAJORS = 64  # a task runs a handful of majors; a typo such as "1-100000" is refused


def check_version(version: object) -> str:
    """`version` if it is a semantic version (MAJOR.MINOR.PATCH[-pre][+build]), else ConfigError."""
    if not isinstance(version, str) or not _SEMVER.match(version):
        raise ConfigError(f"version must be a semantic version such as '2.4.0', got {version!r}")
    return version


@functools.lru_cache(maxsize=64)  # read for every run submitted: an app has one version
def major_of(version: str) -> int:
    return int(check_version(version).split(".", 1)[0])


def check_majors(versions: object, own_major: int, task: str) -> tuple[int, ...]:
    """The majors whose runs a task can run, sorted: `versions=` of `@app.task`.

    None (the default) is the app's own major. Else one major (`2`), a collection of them
    (`{1, 2}`, `range(1, 3)`), or a string: an inclusive range (`"1-2"`) or a list
    (`"1,2"`). It must include `own_major`: the app submits runs of its own major, and a
    task that could not run them would leave them to no one. ConfigError otherwise."""
    if versions is None:
        return (own_major,)
    majors = _parse(versions, task)
    if not majors or len(majors) > MAX_MAJORS:
        raise ConfigError(f"task {task!r}: versions= names {len(majors)} majors; give 1 to {MAX_MAJORS}")
    if own_major not in majors:
        raise ConfigError(f"task {task!r}: versions={versions!r} leaves out the app's own major "
                          f"{own_major}, whose runs this app submits")
    return tuple(sorted(majors))


def _parse(versions: object, task: str) -> set[int]:
    if isinstance(versions, str):
        span = _RANGE.match(versions)
        if span:
            low, high = int(span[1]), int(span[2])
            if low > high or high - low >= MAX_MAJORS:
                raise ConfigError(f"task {task!r}: versions={versions!r} is not a range of up to "
                                  f"{MAX_MAJORS} majors (low-high)")
            return set(range(low, high + 1))
        parts = [part.strip() for part in versions.split(",")]
        if not all(part.isdigit() for part in parts):
            raise ConfigError(f"task {task!r}: versions={versions!r} is neither a range of majors "
                              f"('1-2') nor a list of them ('1,2')")
        return {int(part) for part in parts}
    items: Iterable[object] = [versions] if isinstance(versions, int) else (
        versions if isinstance(versions, (set, frozenset, list, tuple, range)) else [versions])
    if not all(isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in items):
        raise ConfigError(f"task {task!r}: versions= takes majors (integers >= 0), a range such "
                          f"as '1-2' or a list such as '1,2'; got {versions!r}")
    return {int(item) for item in items}  # type: ignore[call-overload]
