"""A limit's max lowered live while a worker is stopped (SIGSTOP), with real worker
processes, on every backend: the stopped worker wakes into the changed world and claims
under the new max, as every other worker does, because the store applies the operator's
max at each claim and no worker keeps one. The runs hold until released, so a claim past
the max would stay visible: the store is sampled throughout and never shows more of the
key's runs running than the max of that moment."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

import runwright as rw
from runwright.runs import RunState

from . import apps
from .harness import DEADLINE_S, WorkerFleet, owner_pid, sigstop_outside_a_write, wait_until
from .test_concurrency_limit_race import _running_now

pytestmark = pytest.mark.process
RUNS = 6
TARGET = "one-per-customer:acme"  # apps.hold_limited: declared max 1


async def test_a_worker_stopped_across_a_lowered_max_claims_under_the_new_one(
        app: rw.App, fleet: WorkerFleet, store_url: str) -> None:
    await app.set_limit(TARGET, 3)
    sleeper, other = fleet.start(concurrency=4), fleet.start(concurrency=4)
    await sleeper.wait_started()
    await other.wait_started()
    handles = [await app.submit(apps.hold_limited, tag=f"t{n}", customer="acme") for n in range(RUNS)]
    ids = [h.id for h in handles]

    async def running() -> list[rw.Run]:
        return [r for r in await app.store.run_get_many(ids) if r.state is RunState.RUNNING]

    first = await wait_until(lambda: _three(running), "three of acme's runs hold, under the raised max")
    # Stop a worker that holds one of them, so that it wakes owning a run of the key.
    pids = {await owner_pid(app, run) for run in first}
    if sleeper.pid not in pids:
        sleeper, other = other, sleeper
    assert sleeper.pid in pids, pids
    await sigstop_outside_a_write(sleeper, store_url)
    await app.set_limit(TARGET, 1)  # lowered while it sleeps
    for run in first:
        if await owner_pid(app, run) != sleeper.pid:
            fleet.release(_tag(run))
    most_after = 0
    sleeper.signal(signal.SIGCONT)
    for run in first:
        fleet.release(_tag(run))
    # From here on, once the three that began under the old max have ended, at most one of
    # acme's runs at any instant; the rest are released one at a time.
    released = {_tag(run) for run in first}
    deadline = time.monotonic() + 4 * DEADLINE_S
    firsts = {f.id for f in first}
    while time.monotonic() < deadline:
        runs = await app.store.run_get_many(ids)
        if all(run.state is RunState.SUCCEEDED for run in runs):
            break
        if all(run.state is not RunState.RUNNING for run in runs if run.id in firsts):
            # Sampled after the read that saw the first three ended (they do not run again):
            # a sample taken before it could still count them.
            now = await _running_now(app, ids)
            most_after = max(most_after, now)
            assert now <= 1, f"{now} of acme's runs ran at once after its max was lowered to 1"
            holding = [run for run in runs if run.state is RunState.RUNNING]
            for run in holding:
                if _tag(run) not in released:
                    released.add(_tag(run))
                    fleet.release(_tag(run))
        await asyncio.sleep(0.01)
    runs = await app.store.run_get_many(ids)
    assert [r.state for r in runs] == [RunState.SUCCEEDED] * RUNS, "every run ended, none lost"
    assert most_after == 1, "the sampler saw the key's one slot in use (so it could have seen two)"
    assert all(r.attempt == 1 for r in runs), "none run twice"
    assert await sleeper.stop() == 0 and await other.stop() == 0


async def _three(running) -> list[rw.Run] | None:  # type: ignore[no-untyped-def]
    held = await running()
    assert len(held) <= 3, f"{len(held)} of acme's runs ran at once under a max of 3"
    return held if len(held) == 3 else None


def _tag(run: rw.Run) -> str:
    tag = run.arguments()["tag"]
    assert isinstance(tag, str)
    return tag
