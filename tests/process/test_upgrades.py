"""A rolling upgrade with real worker processes: old (1.x) and new (2.x) workers on one
database, runs of both majors submitted, old workers drained with SIGTERM one by one.
Every run ends exactly once, and each was executed by a worker of its own major."""

from __future__ import annotations

import pytest

import runwright as rw
from runwright.runs import RunState

from .harness import WorkerFleet, WorkerProcess, runs_of, wait_until
from .upgrade_apps import NEW_VERSION, OLD_VERSION

pytestmark = pytest.mark.process

OLD_SPEC, NEW_SPEC = "tests.process.upgrade_apps:old", "tests.process.upgrade_apps:new"
BATCH = 120


def submitter(url: str, version: str) -> rw.App:
    app = rw.App(url, version=version)

    @app.task(name="work", retries=0)
    async def work(ctx: rw.Context, n: int) -> None: ...

    return app


async def submit(app: rw.App, first: int, count: int) -> list[rw.RunHandle]:
    return await app.submit_many("work", [{"n": n} for n in range(first, first + count)])


async def all_done(app: rw.App, handles: list[rw.RunHandle]) -> bool:
    return all(run.done for run in await runs_of(app, handles))


# Old and new workers side by side, each with its pool: the whole PostgreSQL budget.
@pytest.mark.pg_connections(50)
async def test_a_rolling_upgrade_loses_nothing_and_runs_each_run_on_its_own_major(
        app: rw.App, fleet: WorkerFleet) -> None:
    old_app, new_app = submitter(fleet.url, OLD_VERSION), submitter(fleet.url, NEW_VERSION)
    async with old_app, new_app:
        old_workers = [fleet.start(concurrency=5, app_spec=OLD_SPEC) for _ in range(3)]
        new_workers = [fleet.start(concurrency=5, app_spec=NEW_SPEC)]
        for worker in [*old_workers, *new_workers]:
            await worker.wait_started()
        old_runs = await submit(old_app, 0, BATCH)
        new_runs = await submit(new_app, 0, BATCH)
        # The upgrade: new workers come up, old ones are drained one by one while runs of
        # both majors keep coming (the last old-version submissions before it retires).
        for round_no, worker in enumerate(old_workers):
            started = fleet.start(concurrency=5, app_spec=NEW_SPEC)
            new_workers.append(started)
            await started.wait_started()
            old_runs += await submit(old_app, BATCH * (round_no + 1), BATCH // 2)
            new_runs += await submit(new_app, BATCH * (round_no + 1), BATCH // 2)
            if worker is old_workers[-1]:
                # The last worker of the old major leaves once the old runs are done.
                await wait_until(lambda: all_done(app, old_runs), "every old run ends")
            assert await worker.stop() == 0
        await wait_until(lambda: all_done(app, new_runs), "every new run ends")
        assert all(not w.exited for w in new_workers)
        await check(app, fleet, old_runs, OLD_VERSION, old_workers)
        await check(app, fleet, new_runs, NEW_VERSION, new_workers)


async def check(app: rw.App, fleet: WorkerFleet, handles: list[rw.RunHandle], version: str,
                workers: list[WorkerProcess]) -> None:
    major = version.split(".")[0]
    pids = {w.pid for w in workers}
    executions = fleet.events_by_run("ran")
    for run in await runs_of(app, handles):
        assert run.state is RunState.SUCCEEDED, (run.id, run.state, run.error)
        assert run.version == version
        (execution,) = executions[run.id]  # exactly once
        result = run.value()
        assert result["version"].split(".")[0] == major, (run.id, result)
        assert execution[1] == result["pid"] and result["pid"] in pids
