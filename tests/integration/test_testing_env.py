"""runwright.testing: a user's task with a 1-day durable sleep and retry backoffs of an hour
finishes in well under a second of wall time, on a clock that went through the time it
waited for."""

from __future__ import annotations

import time

import pytest

import runwright as rw
from runwright.testing import Env, SkippingClock

DAY_S = 86_400.0
HOUR = rw.Backoff(base_s=3600, factor=2, cap_s=7200)


def _app() -> rw.App:
    app = rw.App("memory://")

    @app.task(retries=3, backoff=HOUR)
    async def onboard(ctx: rw.Context, name: str) -> dict:
        await ctx.step("greet", lambda: f"hello {name}")
        await ctx.sleep(DAY_S)
        if ctx.attempt < 3:  # two failures: two hour-long backoffs
            raise ConnectionError("the mail server is down")
        await ctx.emit("progress", {"pct": 100})
        return {"hello": name}

    return app


async def test_a_day_long_sleep_and_hour_long_backoffs_take_under_a_second():
    app = _app()
    began = time.monotonic()
    async with Env(app) as env:
        handle = await app.submit("onboard", "ada")
        result = await env.result(handle, timeout_s=30)
        kinds = await env.event_kinds(handle)
        steps = await env.steps(handle)
    wall_s = time.monotonic() - began
    assert result["hello"] == "ada"
    assert env.clock.skipped_s >= DAY_S + 2 * 3600  # the sleep and both backoffs, on the App's clock
    assert wall_s < 1.0, f"took {wall_s:.2f} s of wall time"
    assert kinds.count("progress") == 1 and kinds[-1] == "succeeded"
    assert steps[0] == ("greet", "hello ada")


async def test_an_env_refuses_an_app_not_on_memory(tmp_path):
    app = rw.App(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(rw.ConfigError, match="memory://"):
        Env(app)


async def test_a_run_that_waits_for_what_no_skip_brings_times_out_in_real_time():
    app = rw.App("memory://")

    @app.task
    async def asks(ctx: rw.Context) -> str:
        return str(await ctx.ask("approve?"))

    async with Env(app) as env:
        handle = await app.submit(asks)
        with pytest.raises(TimeoutError, match="real time"):
            await env.result(handle, timeout_s=0.5)


def test_only_an_embedded_store_takes_the_apps_clock():
    # PostgreSQL and Redis judge time by the server's clock, inside their statements.
    for url in ("postgresql://postgres@127.0.0.1:5432/test?schema=x", "redis://127.0.0.1:6379/0"):
        with pytest.raises(rw.ConfigError, match="embedded store"):
            rw.App(url).use_clock(SkippingClock())
