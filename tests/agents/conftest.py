"""Agents on each backend, against a scripted OpenAI-protocol server on loopback."""

from __future__ import annotations

from typing import Iterator

import pytest

from ..integration.conftest import app, running_worker  # noqa: F401 (fixtures shared)


@pytest.fixture
def openai_env(monkeypatch) -> Iterator[None]:
    """Point the openai provider at whatever server the test starts (set per test)."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    yield
