"""The app fleet test processes load as `tests.fleet.fleet_app:app`.

FLEET_TEST_VERSION sets its declared version (its major names the fleet);
FLEET_TEST_RESYNC_S holds its boot resync that long, and a file `hold-resync` in the ledger
holds any resync while it exists; the `hold` op writes a marker
(`held-<pid>` in RUNWRIGHT_TEST_LEDGER) and then holds for `payload["s"]` seconds; the
`block` op writes the same marker and then blocks its process (a sync handler, its event
loop held) until a file `release` is in the ledger; the `work` task leaves one ledger line
per execution (`work run_id fence pid`).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import runwright as rw

app = rw.App(version=os.environ.get("FLEET_TEST_VERSION", "1.0.0"))


def _ledger() -> Path:
    return Path(os.environ["RUNWRIGHT_TEST_LEDGER"])


@app.fleet.on_resync
async def slow_resync() -> None:
    await asyncio.sleep(float(os.environ.get("FLEET_TEST_RESYNC_S", "0")))
    while (_ledger() / "hold-resync").exists():  # a test holds a reconnect resync
        await asyncio.sleep(0.05)


@app.on_fleet("hold")
async def hold(payload: dict[str, Any]) -> dict[str, Any]:
    (_ledger() / f"held-{os.getpid()}").touch()
    await asyncio.sleep(float(payload.get("s", 0)))
    return {"pid": os.getpid()}


@app.on_fleet("block")
def block(payload: dict[str, Any]) -> dict[str, Any]:
    (_ledger() / f"held-{os.getpid()}").touch()
    while not (_ledger() / "release").exists():
        time.sleep(0.05)
    return {"pid": os.getpid()}


@app.on_fleet("whoami")
def whoami(payload: dict[str, Any]) -> dict[str, Any]:
    return {"pid": os.getpid(), "version": app.version}


@app.on_fleet("break")
def broken(payload: dict[str, Any]) -> None:
    raise RuntimeError("this handler always fails")


@app.task(retries=5)
async def work(ctx: rw.Context, n: int) -> int:
    with open(_ledger() / f"{os.getpid()}.log", "a") as out:
        out.write(f"work {ctx.run_id} {ctx.fence} {os.getpid()}\n")
    await asyncio.sleep(0.2)
    return n
