"""Manual retries racing a real worker that claims and runs the same runs, on every
backend: a retry never supersedes a live claim, so no in-flight step runs twice, and a
retry of a running run is refused (RunNotRetryable) while dead runs are re-queued."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

import runwright as rw

from . import apps
from .harness import client, wait_until

pytestmark = pytest.mark.process

STEPS = 3
RUNS = 12
DOOMED = 4
RETRIERS = 3


async def test_retries_racing_a_worker_never_run_a_step_twice(app: rw.App, fleet, store_url: str) -> None:
    worker = fleet.start(concurrency=8)
    await worker.wait_started()
    stepped = [await app.submit(apps.steps_with_ledger, steps=STEPS, min_s=0.02, max_s=0.08)
               for _ in range(RUNS)]
    doomed = [await app.submit(apps.doomed) for _ in range(DOOMED)]
    targets = [h.id for h in (*stepped, *doomed)]
    refused: Counter[str] = Counter()
    retried: list[int] = []
    stop = asyncio.Event()

    async def retrier() -> None:
        async with client(store_url) as mine:
            while not stop.is_set():
                for run_id in random.sample(targets, len(targets)):
                    try:
                        retried.append((await mine.retry(run_id)).id)
                    except rw.RunNotRetryable as exc:
                        refused[exc.state] += 1
                await asyncio.sleep(0)

    never_died = {h.id for h in stepped}

    async def stepped_done_or_taken() -> bool:
        # A retry that took a run which never died ends the race at once: it failed.
        return never_died.intersection(retried) or all(
            run.done for run in await app.store.run_get_many(sorted(never_died)))

    retriers = [asyncio.create_task(retrier()) for _ in range(RETRIERS)]
    try:
        await wait_until(stepped_done_or_taken, "every stepped run ended")
        taken = sorted(never_died.intersection(retried))
        assert not taken, f"retries took runs that never died, from their worker: {taken}"
        await wait_until(lambda: len(retried) >= DOOMED and refused["running"] >= 5,
                         "retries re-queued dead runs and were refused on running ones")
    finally:
        stop.set()
        await asyncio.gather(*retriers)
    for handle in doomed:  # the last retries' attempts end before the worker is stopped
        with pytest.raises(rw.RunFailed):
            await handle.result(timeout_s=60)

    for handle in stepped:
        assert await handle.result(timeout_s=5) == sum(range(STEPS))
    executions = [(run_id, event) for event, run_id, _, _ in fleet.ledger_lines()
                  if event.startswith("step-")]
    twice = {key: n for key, n in Counter(executions).items() if n > 1}
    assert twice == {}, f"steps run more than once (a live claim was superseded): {twice}"
    assert len(executions) == RUNS * STEPS
    for handle in stepped:  # one claim each: no retry took a run from its worker
        kinds = [e.kind for e in await app.events_page(handle.id)]
        assert kinds.count("started") == 1 and "retried" not in kinds, kinds
    for handle in doomed:  # every retry took a dead run, right after it died
        log = await app.events_page(handle.id)
        for before, item in zip(log, log[1:]):
            if item.kind == "retried":
                assert before.kind == "dead" and item.data["previous"] == "dead", log
    assert await worker.stop() == 0
