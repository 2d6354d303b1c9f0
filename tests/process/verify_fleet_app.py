"""The user's app of the `verify --fleet` tests (`tests.process.verify_fleet_app:app`): an
App on RUNWRIGHT_URL with a task of its own; verify's workload is every App's."""

from __future__ import annotations

import runwright as rw

app = rw.App()


@app.task
async def hello(name: str = "world") -> str:
    return f"hello {name}"
