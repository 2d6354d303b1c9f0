"""The app of the multi-machine exit test (`tests.process.exit_apps:app`), loaded by its
`runwright serve` and `runwright worker` processes alike.

`traced_steps` (from trace_apps) waits at a gate for the test to kill its worker there;
`ticking` journals a step every 50 ms until its release file appears, so an interrupt
or a cancel finds it at a step boundary; `record` leaves one ledger line.
"""

from __future__ import annotations

import asyncio

import runwright as rw

from . import apps, trace_apps

app = rw.App()
app.tasks.update(trace_apps.app.tasks)
app.tasks.update({"record": apps.app.tasks["record"]})


def _tick(ctx: rw.Context, i: int) -> int:
    apps.note(f"tick-{i}", ctx)
    return i


@app.task(retries=0)
async def ticking(ctx: rw.Context, tag: str) -> int:
    """A step every 50 ms until the test creates the release file of `tag`."""
    release = apps.release_file(apps.ledger_dir(), tag)
    i = 0
    while not release.exists() and i < 2400:  # two minutes at most: nothing hangs forever
        await ctx.step(f"tick-{i}", _tick, ctx, i)
        await asyncio.sleep(0.05)
        i += 1
    return i
