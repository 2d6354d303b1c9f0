"""Flow control on a schedule's fires, on every backend: a fire is decided by its task's
singleton, throttle, debounce or batch as a submission is (a cron job whose last run is
still on does not overlap it), and each decision is said in the log. The scheduler is
ticked at given times (no wall clock): each tick fires what is due then."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

import runwright as rw
from runwright.engine._scheduler import Scheduler

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp()  # the hourly fires: T0 + 1 h, + 2 h, ...
HOUR = 3600.0


async def _hourly(app: rw.App, task: Any, args: dict[str, Any]) -> Scheduler:
    spec = app.schedule_spec("hourly", cron="0 * * * *", task=task, args=args, tz="UTC", misfire="catch_up",
                             catch_up_limit=10, queue=None, priority=None)
    await app.save_schedule(spec, now=T0)
    return Scheduler(app.store, flow=app.worker()._flow_of)


async def _next_fire_at(app: rw.App) -> float:
    (schedule,) = await app.list_schedules()
    return schedule.next_fire_at


async def test_a_singleton_skips_the_fires_while_its_run_is_on_and_says_so(app, caplog):
    @app.task(singleton=rw.Singleton(key="{args.region}"))
    async def report(region: str) -> str:
        return region

    scheduler = await _hourly(app, report, {"region": "eu"})
    caplog.set_level(logging.INFO, logger="runwright")
    (first,) = await scheduler.tick(now=T0 + HOUR + 1)
    # Two fires due in one tick (a catch-up) and the first run still queued: both skipped.
    assert await scheduler.tick(now=T0 + 3 * HOUR + 1) == []
    assert [r.id for r in await app.list_runs(task="report")] == [first.id]
    assert await _next_fire_at(app) == T0 + 4 * HOUR, "the skipped fires are passed, not retried"
    skipped = [r.getMessage() for r in caplog.records if "skipped a fire" in r.getMessage()]
    assert len(skipped) == 2 and all(f"held by run {first.id}" in line for line in skipped), skipped
    # Once the run ends, the next fire makes a run again.
    await app.cancel(first.id)
    (second,) = await scheduler.tick(now=T0 + 4 * HOUR + 1)
    assert second.id != first.id and second.key.endswith("T04:00:00")


async def test_a_singleton_replaces_the_queued_run_of_an_earlier_fire(app):
    @app.task(singleton=rw.Singleton(key="all", on_conflict="replace"))
    async def refresh() -> None:
        return None

    scheduler = await _hourly(app, refresh, {})
    (first,) = await scheduler.tick(now=T0 + HOUR + 1)
    (second,) = await scheduler.tick(now=T0 + 2 * HOUR + 1)
    assert second.outcome == "replaced" and second.replaced == first.id
    assert (await app.read_run(first.id)).state is rw.RunState.CANCELLED


async def test_a_throttle_drops_fires_within_its_period(app, caplog):
    @app.task(throttle=rw.Throttle(key="all", per_s=3 * HOUR, on_excess="drop"))
    async def digest() -> None:
        return None

    scheduler = await _hourly(app, digest, {})
    caplog.set_level(logging.INFO, logger="runwright")
    (first,) = await scheduler.tick(now=T0 + HOUR + 1)
    assert await scheduler.tick(now=T0 + 3 * HOUR + 1) == []  # the fires of 2 h and 3 h: in its period
    (later,) = await scheduler.tick(now=T0 + 4 * HOUR + 1)  # 4 h: the period since 1 h is over
    assert [r.id for r in await app.list_runs(task="digest")] == sorted([first.id, later.id], reverse=True)
    said = f"fired into run {first.id} (dropped)"
    dropped = [r.getMessage() for r in caplog.records if said in r.getMessage()]
    assert len(dropped) == 2, [r.getMessage() for r in caplog.records]


async def test_fires_of_a_batched_task_join_one_run_up_to_its_size(app):
    @app.task(batch=rw.Batch(key="{args.region}", max_items=2, max_wait_s=10 * HOUR))
    async def index(items: list[dict[str, Any]]) -> int:
        return len(items)

    scheduler = await _hourly(app, index, {"region": "eu"})
    made = await scheduler.tick(now=T0 + 3 * HOUR + 1)  # three fires: a batch of two, then a new one
    assert len(made) == 2
    runs = {r.id: r for r in await app.list_runs(task="index")}
    assert sorted(len(r.arguments()["items"]) for r in runs.values()) == [1, 2]
    assert all(item == {"region": "eu"} for r in runs.values() for item in r.arguments()["items"])


async def test_a_debounced_task_takes_the_fires_within_its_window_in_one_run(app):
    @app.task(debounce=rw.Debounce(key="all", window_s=2 * HOUR))
    async def settle(n: int) -> int:
        return n

    scheduler = await _hourly(app, settle, {"n": 1})
    (first,) = await scheduler.tick(now=T0 + HOUR + 1)
    assert await scheduler.tick(now=T0 + 2 * HOUR + 1) == []  # joined the first: its window moved on
    (run,) = await app.list_runs(task="settle")
    assert run.id == first.id and run.run_at == pytest.approx(T0 + 4 * HOUR + 1)


async def test_a_fire_of_a_task_without_flow_control_is_inserted_as_before(app):
    @app.task
    async def plain() -> None:
        return None

    scheduler = await _hourly(app, plain, {})
    made = await scheduler.tick(now=T0 + 3 * HOUR + 1)
    assert [r.key for r in made] == [f"schedule:hourly:2026-06-01T0{h}:00:00" for h in (1, 2, 3)]
    assert all(r.limits is None for r in made)


async def test_a_debounce_merge_that_raises_refuses_that_fire_not_the_scheduler(app, caplog):
    def merge(standing: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("cannot merge these")

    @app.task(debounce=rw.Debounce(key="all", window_s=2 * HOUR, merge=merge))
    async def settle(n: int) -> int:
        return n

    scheduler = await _hourly(app, settle, {"n": 1})
    caplog.set_level(logging.INFO, logger="runwright")
    (first,) = await scheduler.tick(now=T0 + HOUR + 1)
    assert await scheduler.tick(now=T0 + 2 * HOUR + 1) == []  # its merge raised: this fire is not made
    assert await _next_fire_at(app) == T0 + 3 * HOUR, "the schedule moved on all the same"
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("did not fire" in line and "ValueError: cannot merge these" in line for line in said), said
    (run,) = await app.list_runs(task="settle")
    assert run.id == first.id and run.arguments() == {"n": 1}, "the standing run is left as it was"
