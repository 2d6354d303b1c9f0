"""A worker's slots, alone: which attempt is a run's, when a slot is free, what a claim
holds. The worker's races over them are raced in tests/integration/test_execution.py."""

import asyncio
import time

from runwright.engine._slots import Slots
from runwright.runs import Run, RunState


def _run(run_id: int, fence: int = 1) -> Run:
    now = time.time()
    return Run(id=run_id, key=f"k{run_id}", task="t", queue="default", priority=0, state=RunState.RUNNING,
               args="{}", attempt=fence, max_attempts=3, fence=fence, run_at=now, created_at=now)


async def test_an_earlier_attempt_winding_down_keeps_its_slot_but_never_the_runs_place():
    slots = Slots(2)
    first = slots.start(_run(7, fence=1), asyncio.ensure_future(asyncio.sleep(0)))
    second = slots.start(_run(7, fence=2), asyncio.ensure_future(asyncio.sleep(0)))
    assert slots.get(7) is second and slots.free == 0  # both attempts hold a slot
    slots.end(first)  # the earlier attempt's task ends: the newer one stays the run's
    assert slots.get(7) is second and slots.free == 1
    slots.end(second)
    assert slots.get(7) is None and slots.free == 2 and slots.idle
    await asyncio.sleep(0)


async def test_a_finishing_run_frees_its_slot_but_stays_the_runs_until_it_ends():
    slots = Slots(1)
    active = slots.start(_run(1), asyncio.ensure_future(asyncio.sleep(0)))
    assert slots.full
    slots.freed.clear()
    with slots.finishing(active):
        assert slots.free == 1 and slots.freed.is_set()
        assert slots.full  # as many finishes on their way as slots: a claim waits
        assert slots.get(1) is active and slots.runs() == [active]  # its lease is still kept
    slots.end(active)
    assert not slots.full and slots.idle
    await asyncio.sleep(0)


async def test_a_claim_holds_the_slots_it_may_fill_and_a_full_claim_means_a_backlog():
    slots = Slots(5)
    limit = slots.reserve(3)
    assert limit == 3 and slots.free == 2 and slots.claiming and not slots.idle
    assert slots.reserve(10) == 2 and slots.free == 0
    runs = [_run(1), _run(2)]
    slots.claimed(2, runs)  # the second claim took all it asked for
    assert slots.backlog
    for run in runs:
        slots.start(run, asyncio.ensure_future(asyncio.sleep(0)))
    assert slots.cohort_going
    slots.claimed(3, None)  # the first failed: its slots are given back, no backlog known
    assert not slots.backlog and not slots.claiming and slots.free == 3
    for active in slots.runs():
        slots.end(active)
    assert not slots.cohort_going and slots.idle
    await asyncio.sleep(0)
