"""Schedules: cron without a single point of failure, on every backend, over an injected clock."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import zoneinfo

import pytest
from croniter import croniter

import runwright as rw
from runwright.engine._scheduler import Scheduler
from runwright.store import store_from_url
from runwright.store._params import RunListParams

from .conftest import running_worker

UTC = dt.UTC
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


def at(*fields: int, tz: dt.tzinfo = UTC) -> float:
    return dt.datetime(*fields, tzinfo=tz).timestamp()


def register(app: rw.App) -> rw.TaskSpec:
    @app.task
    async def report(ctx: rw.Context, kind: str) -> str:
        return kind

    return report


async def fired_keys(app: rw.App) -> list[str]:
    runs = await app.store.run_list(RunListParams(task="report", limit=10_000))
    return sorted(run.key for run in runs)


@pytest.mark.parametrize("cron, tz, misfire, catch_up_limit, match", [
    ("61 * * * *", "UTC", "skip", 10, "malformed cron"),
    ("every day", "UTC", "skip", 10, "malformed cron"),
    ("0 9 * * *", "Mars/Olympus", "skip", 10, "unknown time zone"),
    ("0 9 * * *", "UTC", "sometimes", 10, "misfire must be one of"),
    ("0 9 * * *", "UTC", "catch_up", 0, "catch_up_limit"),
])
async def test_bad_schedules_are_clear_errors_and_nothing_is_stored(app, cron, tz, misfire,
                                                                    catch_up_limit, match):
    report = register(app)
    with pytest.raises(rw.InvalidInput, match=match):
        app.schedule("nightly", cron=cron, task=report, args={"kind": "x"}, tz=tz, misfire=misfire,
                     catch_up_limit=catch_up_limit)
    with pytest.raises(rw.UnknownTask):
        app.schedule("nightly", cron="0 9 * * *", task="nope")
    with pytest.raises(rw.BadArguments):
        app.schedule("nightly", cron="0 9 * * *", task=report, args={"wrong": 1})
    assert app.schedules == {} and await app.store.schedule_list() == []


async def test_three_schedulers_fire_each_time_once_even_when_one_dies(app, store_url):
    report = register(app)
    start = at(2026, 6, 1, 0, 0)
    app.schedule("every5", cron="*/5 * * * *", task=report, args={"kind": "tick"})
    await app.sync_schedules(now=start)
    stores = [store_from_url(store_url) for _ in range(3)]
    for store in stores:
        await store.open()
    try:
        schedulers = [Scheduler(store) for store in stores]
        now = start
        while now < start + 2 * 3600:
            now += 20
            alive = schedulers if now < start + 3600 else schedulers[1:]  # one dies at 1 h
            # They tick concurrently, each a few seconds apart in the injected clock.
            await asyncio.gather(*(s.tick(now + offset) for offset, s in enumerate(alive)))
    finally:
        for store in stores:
            await store.close()
    expected = []
    times = croniter("*/5 * * * *", dt.datetime.fromtimestamp(start, UTC))
    while (fire := times.get_next(dt.datetime)).timestamp() <= start + 2 * 3600:
        expected.append(f"schedule:every5:{fire.replace(tzinfo=None).isoformat()}")
    assert await fired_keys(app) == sorted(expected) and len(expected) == 24


async def test_daylight_saving_time_fires_once_per_local_time(app):
    report = register(app)
    app.schedule("fall", cron="30 1 * * *", task=report, args={"kind": "fall"}, tz="America/New_York")
    app.schedule("spring", cron="30 2 * * *", task=report, args={"kind": "spring"},
                 tz="America/New_York")
    scheduler = Scheduler(app.store)
    # The night DST starts (02:00-03:00 is skipped) and the night it ends (01:00-02:00 twice).
    for night in ((2026, 3, 7), (2026, 10, 31)):
        begin = at(*night, 23, 0, tz=NEW_YORK)
        await app.sync_schedules(now=begin)
        for minute in range(0, 6 * 60, 10):
            await scheduler.tick(begin + minute * 60)
    runs = {r.key: r for r in await app.store.run_list(RunListParams(task="report", limit=100))}
    fall = sorted(k for k in runs if k.startswith("schedule:fall:"))
    spring = sorted(k for k in runs if k.startswith("schedule:spring:"))
    # 01:30 came twice on November 1st: one run, at the first of them.
    assert fall == ["schedule:fall:2026-03-08T01:30:00", "schedule:fall:2026-11-01T01:30:00"]
    assert runs[fall[1]].run_at == at(2026, 11, 1, 1, 30, tz=dt.timezone(dt.timedelta(hours=-4)))
    # 02:30 did not exist on March 8th: it fired at 03:00.
    assert spring == ["schedule:spring:2026-03-08T03:00:00", "schedule:spring:2026-11-01T02:30:00"]
    assert runs[spring[0]].run_at == at(2026, 3, 8, 3, 0, tz=NEW_YORK)


async def test_misfires_skip_or_catch_up_bounded(app):
    report = register(app)
    app.schedule("skipper", cron="0 * * * *", task=report, args={"kind": "s"}, misfire="skip")
    app.schedule("catcher", cron="0 * * * *", task=report, args={"kind": "c"}, misfire="catch_up",
                 catch_up_limit=3)
    start = at(2026, 6, 1, 0, 0)
    await app.sync_schedules(now=start)
    # Every worker was down for 10 hours; one comes back 20 minutes past the hour.
    await Scheduler(app.store).tick(start + 10 * 3600 + 20 * 60)
    keys = await fired_keys(app)
    assert [k for k in keys if "skipper" in k] == []  # the last missed fire is 20 min late
    assert [k for k in keys if "catcher" in k] == [
        f"schedule:catcher:2026-06-01T{hour:02d}:00:00" for hour in (8, 9, 10)]
    (later,) = [s for s in await app.store.schedule_list() if s.name == "skipper"]
    assert later.next_fire_at == start + 11 * 3600


async def test_pause_resume_delete(app):
    report = register(app)
    app.schedule("hourly", cron="0 * * * *", task=report, args={"kind": "h"})
    start = at(2026, 6, 1, 0, 0)
    await app.sync_schedules(now=start)
    await app.pause_schedule("hourly")
    scheduler = Scheduler(app.store)
    await scheduler.tick(start + 3600)
    assert await fired_keys(app) == []
    await app.resume_schedule("hourly", now=start + 3600 + 1)
    await scheduler.tick(start + 2 * 3600 + 1)
    assert await fired_keys(app) == ["schedule:hourly:2026-06-01T02:00:00"]
    await app.delete_schedule("hourly")
    assert await app.store.schedule_list() == []
    with pytest.raises(rw.InvalidInput, match="unknown schedule"):
        await app.pause_schedule("hourly")


async def test_a_fire_whose_key_names_a_run_submitted_otherwise_says_so_a_refire_is_silent(app, caplog):
    """A fire gets the run its key names (a re-fire after a crash must get its own fire's
    run, not make a second). When that run was submitted otherwise (by hand, here), the fire
    is not made, never silently: a WARNING names the schedule, the key, the run and what differs.
    The schedule still moves on, and its next fire is made as usual."""
    report = register(app)
    app.schedule("hourly", cron="0 * * * *", task=report, args={"kind": "h"})
    start = at(2026, 6, 1, 0, 0)
    await app.sync_schedules(now=start)
    squatter = await app.submit(report, kind="by hand", key="schedule:hourly:2026-06-01T01:00:00")
    scheduler = Scheduler(app.store)
    with caplog.at_level(logging.WARNING, logger="runwright"):
        assert await scheduler.tick(start + 3600 + 1) == []
    (said,) = [r for r in caplog.records if "did not fire" in r.getMessage()]
    key = "schedule:hourly:2026-06-01T01:00:00"
    assert said.getMessage() == (f"schedule 'hourly' did not fire: its key {key!r} names run "
                                 f"{squatter.id}, submitted with other arguments")
    assert said.__dict__["rw"] == {"schedule": "hourly", "key": key, "run_id": squatter.id,
                                   "differs": "arguments"}
    assert (await squatter.refresh()).arguments() == {"kind": "by hand"}
    (stale,) = await app.store.schedule_list()
    assert stale.next_fire_at == start + 2 * 3600
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="runwright"):
        (fired,) = await scheduler.tick(start + 2 * 3600 + 1)
        # A worker that read the schedule before that tick moved it fires the same time again
        # (as after a crash between the insert and the move): it gets that run, and says nothing.
        assert await scheduler._fire(stale, start + 2 * 3600 + 2) == []
    assert fired.key == "schedule:hourly:2026-06-01T02:00:00" and fired.arguments() == {"kind": "h"}
    assert [r for r in caplog.records if "did not fire" in r.getMessage()] == []
    assert await fired_keys(app) == ["schedule:hourly:2026-06-01T01:00:00",
                                     "schedule:hourly:2026-06-01T02:00:00"]


async def test_a_worker_fires_declared_schedules_in_real_time(app):
    report = register(app)
    app.schedule("fast", cron="* * * * * *", task=report, args={"kind": "fast"})  # every second
    async with running_worker(app, schedule_tick_s=0.1):
        deadline = asyncio.get_running_loop().time() + 30
        while len([k for k in await fired_keys(app)]) < 2:
            assert asyncio.get_running_loop().time() < deadline, "no schedule fired"
            await asyncio.sleep(0.05)
    runs = await app.store.run_list(RunListParams(task="report", limit=10))
    assert all(r.key.startswith("schedule:fast:") for r in runs)
    assert len({r.key for r in runs}) == len(runs)
