"""The app that traced worker subprocesses load as `tests.process.trace_apps:app`.

Every task takes a `secret` argument that must never appear in a span attribute. Steps
leave ledger lines and may wait at a gate, as in `apps` (whose helpers they use).
"""

from __future__ import annotations

import runwright as rw

from .apps import ledgered_step

app = rw.App()


@app.task(retries=0)
async def traced_steps(ctx: rw.Context, secret: str, steps: int, gate: int) -> int:
    """`steps` journaled steps; step `gate` waits at its gate (apps.gate_file)."""
    for i in range(steps):
        await ctx.step(f"step-{i}", ledgered_step, ctx, i, 0.0, 0.0, i == gate)
    return steps


@app.task(retries=0)
async def traced_child(ctx: rw.Context, secret: str) -> int:
    return len(await ctx.step("child-work", lambda: secret))


@app.task(retries=0)
async def traced_parent(ctx: rw.Context, secret: str) -> int:
    """A step, then a child run awaited (the parent parks until the child ends)."""
    await ctx.step("before-child", lambda: len(secret))
    child = await ctx.submit(traced_child, secret=secret)
    return int(await child)


@app.task(retries=1, backoff=rw.Backoff(base_s=0.01, jitter=0.0))
async def retried_then_taken_over(ctx: rw.Context, secret: str) -> int:
    """Step 0, then a failure that is retried; on attempt 2, step 1 waits at its gate
    (where the test kills its worker, so that another worker takes attempt 2 over)."""
    await ctx.step("step-0", ledgered_step, ctx, 0, 0.0, 0.0, False)
    if ctx.attempt == 1:
        raise ConnectionError("the first attempt fails, and is retried")
    await ctx.step("step-1", ledgered_step, ctx, 1, 0.0, 0.0, True)
    return ctx.attempt
