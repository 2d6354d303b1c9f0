"""A rate per key against worker processes racing to claim, on every backend that serves
processes: 4 workers claim runs of one customer whose rate is 4 (cost) per 0.5 s, each run
costing 1, 2 or 3. Read from the store once every run ended (each run's one start, its
`started_at`, checked to be its only one: first attempt, first fence), no window of 0.5 s
holds starts costing more than 4, a window did hold 4 (so the check could fail), and every
run ended, claimed once: nothing lost."""

from __future__ import annotations

import pytest

import runwright as rw
from runwright.runs import RunState
from runwright.store._params import EventListParams

from . import apps
from .harness import DEADLINE_S, WorkerFleet, wait_until

pytestmark = pytest.mark.process
WORKERS, SLOTS, RUNS = 4, 8, 24
COSTS = (1, 2, 3)


async def test_workers_racing_on_one_rated_key_never_start_more_than_its_rate(
        app: rw.App, fleet: WorkerFleet) -> None:
    workers = [fleet.start(concurrency=SLOTS) for _ in range(WORKERS)]
    for worker in workers:
        await worker.wait_started()
    handles = await app.submit_many(apps.rated, [{"customer": "acme", "cost": COSTS[n % 3], "n": n}
                                                 for n in range(RUNS)])
    ids = [h.id for h in handles]

    async def all_ended() -> bool:
        return all(run.state is RunState.SUCCEEDED for run in await app.store.run_get_many(ids))

    total = sum(COSTS[n % 3] for n in range(RUNS))
    await wait_until(all_ended, "every run succeeded",
                     timeout_s=2 * DEADLINE_S + 3 * total / apps.RATE_MAX * apps.RATE_PER_S)
    runs = await app.store.run_get_many(ids)
    assert len(runs) == RUNS
    assert all(run.attempt == 1 and run.fence == 1 for run in runs), "each run started once, claimed once"
    # Every start the store logged (a run's `started` events: a restart would be one more),
    # with its cost and the worker that made it.
    cost_of = {h.id: COSTS[n % 3] for n, h in enumerate(handles)}
    starts = []
    for run_id in ids:
        events = await app.store.event_list(EventListParams(run_id))
        starts += [(event.at, cost_of[run_id], event.data["worker"])
                   for event in events if event.kind == "started"]
    starts.sort()
    assert len(starts) == RUNS
    assert sorted(at for at, _, _ in starts) == sorted(run.started_at for run in runs)
    worst = 0
    for i, (at, _, _) in enumerate(starts):
        window = sum(cost for other, cost, _ in starts[i:] if other < at + apps.RATE_PER_S)
        worst = max(worst, window)
        assert window <= apps.RATE_MAX, (
            f"starts costing {window} in the window from {at}, over the rate {apps.RATE_MAX} per "
            f"{apps.RATE_PER_S} s: {[(round(t - starts[0][0], 4), c) for t, c, _ in starts]}")
    assert worst == apps.RATE_MAX, f"no window was ever full ({worst}): the check could not fail"
    # The workers raced: more than one of them started runs of the key.
    assert len({worker for _, _, worker in starts}) >= 2, "one worker took every run: no race"
