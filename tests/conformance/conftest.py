"""The store scenarios run on the in-process backend too (`memory://`): it must pass
every one the three real-database backends pass. Elsewhere (workers in processes of their
own, the CLI, HTTP across processes) it has no place, so only this folder adds it."""

from __future__ import annotations

import pytest

from ..conftest import BACKENDS

STORE_BACKENDS = [*BACKENDS, "memory"]


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param
