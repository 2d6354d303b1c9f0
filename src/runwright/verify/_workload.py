"""The verify app (`runwright.verify._workload:app`) that verify's own workers load: an App
on RUNWRIGHT_URL; its tasks are every App's (`tasks`, which says what they do and how
their ledger is written)."""

from __future__ import annotations

import functools

from ..app import App
from ._tasks import CHILD_TASK, LEDGER_ENV, LEDGER_EVENT, LEDGER_TASK, QUEUE, RUN_TASK

__all__ = ["APP_SPEC", "CHILD_TASK", "LEDGER_ENV", "LEDGER_EVENT", "LEDGER_TASK", "QUEUE", "RUN_TASK",
           "verify_app"]  # and `app`, built on first use

APP_SPEC = "runwright.verify._workload:app"


def verify_app(url: str | None = None, version: str = "0.0.0") -> App:
    """An App on `url` (else RUNWRIGHT_URL) with the verify tasks (every App has them)."""
    return App(url, version=version)


@functools.cache
def _worker_app() -> App:
    return verify_app()


def __getattr__(name: str) -> App:
    """`app`, built on first use: importing this module reads no store URL until a
    worker loads `runwright.verify._workload:app`."""
    if name == "app":
        return _worker_app()
    raise AttributeError(name)
