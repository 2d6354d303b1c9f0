"""Cron across real worker processes: every worker may fire, each fire time makes one run."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import time

import asyncpg
import pytest
from croniter import croniter

import runwright as rw
from runwright.store._params import RunListParams

from . import apps
from .harness import WorkerFleet, wait_until

pytestmark = pytest.mark.process

SPEED = 600  # the injected clock: ten minutes a second, so "*/10 * * * *" fires every second
START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp()


async def fired(app: rw.App) -> list[rw.Run]:
    return await app.store.run_list(RunListParams(task="record", limit=10_000))


# Three workers and a rescuer (the most measured: 28).
@pytest.mark.pg_connections(34)
async def test_three_workers_fire_each_time_once_across_a_sigkill(app: rw.App, fleet: WorkerFleet) -> None:
    anchor = time.time()
    clock = f"{anchor}:{START}:{SPEED}"
    now = START + (time.time() - anchor) * SPEED
    spec = app.schedule_spec("every10", cron="*/10 * * * *", task=apps.record, args={"n": 0}, tz="UTC",
                             misfire="catch_up", catch_up_limit=1000, queue=None, priority=None)
    saved = await app.save_schedule(spec, now=now)
    workers = [fleet.start(env={"RUNWRIGHT_SCHEDULE_CLOCK": clock}) for _ in range(3)]
    await wait_until(lambda: _at_least(app, 3), "three fires")
    workers[1].signal(signal.SIGKILL)  # a scheduler dies mid-way: the others go on
    await wait_until(lambda: _at_least(app, 8), "five more fires after the kill")
    await app.pause_schedule("every10")
    for worker in (workers[0], workers[2]):
        await worker.wait_started()
        assert await worker.stop() == 0
    (schedule,) = await app.store.schedule_list()
    expected = []
    times = croniter("*/10 * * * *", dt.datetime.fromtimestamp(saved.next_fire_at - 1, dt.UTC))
    while (fire := times.get_next(dt.datetime)).timestamp() < schedule.next_fire_at:
        expected.append(f"schedule:every10:{fire.replace(tzinfo=None).isoformat()}")
    runs = await fired(app)
    assert sorted(r.key for r in runs) == expected  # none missed, none twice
    executions = fleet.events_by_run("ran")
    assert sorted(executions) == sorted(r.id for r in runs)
    # A fire's run in flight on the killed worker runs again after its takeover (at least
    # once); every other fire ran exactly once.
    assert all(1 <= len(executions[r.id]) <= 1 + r.recoveries for r in runs)


async def _at_least(app: rw.App, count: int) -> bool:
    return len(await fired(app)) >= count


def _process_stopped(pid: int) -> bool:
    """True when `pid` is stopped (SIGSTOP: state T in /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


# A stop that came between a fire's two writes (its run, then its schedule's next fire
# time) once cancelled the second: the run was made but the schedule still named its
# time as to come. The race is made here: the worker is stopped right after its insert,
# the schedule's row is locked, and the worker is asked to stop and let go on.
@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_worker_stopped_mid_fire_moves_the_schedule_past_the_run_it_made(
        app: rw.App, fleet: WorkerFleet, store_url: str) -> None:
    anchor = time.time()
    clock = f"{anchor}:{START}:{SPEED}"
    spec = app.schedule_spec("every10", cron="*/10 * * * *", task=apps.record, args={"n": 0}, tz="UTC",
                             misfire="catch_up", catch_up_limit=1000, queue=None, priority=None)
    await app.save_schedule(spec, now=START + (time.time() - anchor) * SPEED)
    worker = fleet.start(env={"RUNWRIGHT_SCHEDULE_CLOCK": clock,
                              "RUNWRIGHT_CRASH_POINTS": "schedule.after_insert=stop"})
    await wait_until(lambda: _process_stopped(worker.pid), "the worker stops right after a fire's insert")
    made = await fired(app)
    assert made, "the fire's runs are inserted"
    base, _, query = store_url.partition("?schema=")
    pg = await asyncpg.connect(base, server_settings={"search_path": query})
    try:
        async with pg.transaction():
            await pg.execute("SELECT 1 FROM schedules WHERE name = 'every10' FOR UPDATE")
            worker.signal(signal.SIGTERM)
            worker.signal(signal.SIGCONT)
            # Long enough for the stop to reach its side tasks, were it to cancel the fire.
            await asyncio.sleep(0.5)
        assert await worker.wait_exit() == 0
    finally:
        await pg.close()
    (schedule,) = await app.store.schedule_list()
    assert max(r.run_at for r in made) < schedule.next_fire_at, (
        f"the schedule still names a time it fired: next {schedule.next_fire_at}, runs {made}")
