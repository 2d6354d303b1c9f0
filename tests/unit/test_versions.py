"""`versions=` of a task: the majors whose runs its code can run, checked at registration."""

from __future__ import annotations

import pytest

import runwright as rw
from runwright.errors import ConfigError
from runwright.tasks._registry import Registry


def registered(version: str, **options: object) -> tuple[int, ...] | None:
    registry = Registry(version)

    @registry.task(**options)  # type: ignore[call-overload]
    async def job(ctx: rw.Context) -> None: ...

    return registry.tasks["job"].majors


@pytest.mark.parametrize(("versions", "majors"), [
    (None, (2,)), (2, (2,)), ({1, 2}, (1, 2)), ([2, 1], (1, 2)), (range(1, 4), (1, 2, 3)),
    ("1-2", (1, 2)), ("2, 1", (1, 2)), ("2", (2,)), (frozenset({2, 3}), (2, 3)),
])
def test_versions_name_the_majors_a_task_runs(versions: object, majors: tuple[int, ...]) -> None:
    assert registered("2.4.0", versions=versions) == majors


@pytest.mark.parametrize(("versions", "says"), [
    ("1", "leaves out the app's own major 2"), ({0, 1}, "leaves out"), ("3-1", "not a range"),
    ("1-500", "not a range"), ("v1", "neither a range"), ("1,x", "neither a range"),
    ([], "names 0 majors"), ([-1, 2], "integers >= 0"), (2.0, "integers >= 0"),
    ([True], "integers >= 0"), ({"2"}, "integers >= 0"), (range(0, 100), "names 100 majors"),
])
def test_bad_versions_are_refused_at_registration(versions: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        registered("2.4.0", versions=versions)
    assert "'job'" in str(refused.value)


def test_an_app_records_its_version_in_what_it_registers(tmp_path) -> None:
    app = rw.App(f"sqlite:///{tmp_path / 'x.db'}", version="3.1.0", builtin_jobs=False)

    @app.task(versions="2-3")
    async def job(ctx: rw.Context) -> None: ...

    @app.task
    async def plain(ctx: rw.Context) -> None: ...

    assert app.registry.version == "3.1.0"
    assert app.registry.runnable_majors() == {"job": [2, 3], "plain": [3]}
