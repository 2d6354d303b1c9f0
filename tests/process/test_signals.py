"""Signals with real worker processes, on every backend: a signal sent while no worker
holds the waiting run resumes it on another worker, delivered once across a SIGKILL between
its take and its journal entry; signal-with-start raced by 20 processes makes one run and
delivers every signal once; signals sent by 5 processes while the run's short waits linger
and time out are each taken once, in order."""

from __future__ import annotations

import glob
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import runwright as rw
from runwright.runs import RunState, WaitReason
from runwright.store._params import EventListParams

from . import apps
from .harness import DEADLINE_S, ROOT, WorkerFleet, outputs, wait_until

pytestmark = pytest.mark.process

SENDERS = 20


async def _parked_on_signal(app: rw.App, run_id: int) -> rw.Run | None:
    run = await app.store.run_get(run_id)
    parked = run is not None and run.state is RunState.QUEUED and run.waiting == WaitReason.SIGNAL
    return run if parked else None


async def _done(app: rw.App, run_id: int) -> rw.Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None


async def test_a_signal_sent_while_no_worker_holds_the_run_resumes_it_once(app: rw.App,
                                                                            fleet: WorkerFleet) -> None:
    first = fleet.start(concurrency=1)
    handle = await app.submit(apps.await_payment, order="o-1")
    parked = await wait_until(lambda: _parked_on_signal(app, handle.id), "the run parks on its wait")
    assert parked.owner is None, "a run waiting on a signal holds no slot"
    first.signal(signal.SIGKILL)
    await first.wait_exit()

    # No worker runs: the signal is kept with the run, and a second one waits behind it.
    sent = await handle.signal("payment", {"amount": 42}, key="pay-1")
    assert await handle.signal("payment", {"amount": 42}, key="pay-1") == sent, "a retried send keeps one"
    await handle.signal("payment", {"amount": 99})
    # The next worker dies right after it takes the signal, before the journal says so.
    crashing = fleet.start(concurrency=1, env={"RUNWRIGHT_CRASH_POINTS": "signal.after_take:payment=kill"})
    assert await crashing.wait_exit() != 0
    third = fleet.start(concurrency=1)
    final = await wait_until(lambda: _done(app, handle.id), "the signalled run ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    assert final.value() == {"order": "o-1", "payment": {"amount": 42}, "pid": third.pid}
    assert fleet.events_by_run("prepare")[handle.id] == [(1, first.pid)], "the first step ran once"
    assert fleet.events_by_run("charge")[handle.id] == [(3, third.pid)], "the last step ran once, after"
    taken, pending = await app.signals(handle.id)
    assert (taken.seq, taken.position is not None) == (1, True), "the first signal was taken, once"
    assert (pending.seq, pending.pending, pending.payload) == (2, True, {"amount": 99})
    kinds = [e.kind for e in await app.store.event_list(EventListParams(handle.id))]
    assert kinds.count("signalled") == 2
    with pytest.raises(rw.RunEnded):
        await handle.signal("payment", {"amount": 1})
    assert await third.stop() == 0


@pytest.mark.pg_connections(48)
async def test_signal_with_start_raced_by_20_processes_makes_one_run_and_delivers_each_signal_once(
        app: rw.App, fleet: WorkerFleet, store_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    senders = [subprocess.Popen([sys.executable, "-m", "tests.process.signal_actors", store_url, str(go),
                                 "conversation-1", str(SENDERS)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(SENDERS)]
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == SENDERS or any(
            s.poll() is not None for s in senders), "every sender is ready", timeout_s=2 * DEADLINE_S)
        assert all(s.poll() is None for s in senders), "a sender died before the start"
        worker = fleet.start(concurrency=4)  # working while the signals land
        go.touch()
        answers = []
        for sender in senders:
            out, err = outputs(sender, 2 * DEADLINE_S)
            assert sender.returncode == 0, err
            answers.append(json.loads(out))
    finally:
        for sender in senders:
            sender.kill()
    assert all("error" not in a for a in answers), answers
    assert len({a["run_id"] for a in answers}) == 1, "one run for the key"
    assert sorted(a["existed"] for a in answers) == [False] + [True] * (SENDERS - 1), "one sender started it"
    assert sorted(a["seq"] for a in answers) == list(range(1, SENDERS + 1)), "every signal kept, once"
    run_id = answers[0]["run_id"]
    final = await wait_until(lambda: _done(app, run_id), "the run takes its 20 signals and ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    pids = [s.pid for s in senders]
    assert sorted(final.value()) == sorted(pids), "each sender's signal delivered once"
    signals = await app.signals(run_id)
    assert [s.payload for s in signals] == final.value(), "taken in the order sent"
    assert len({s.position for s in signals}) == SENDERS and all(not s.pending for s in signals)
    assert await worker.stop() == 0


SPRAYERS, TICKS = 5, 20


@pytest.mark.pg_connections(32)
async def test_signals_raced_against_short_waits_are_each_taken_once_in_the_order_sent(
        app: rw.App, fleet: WorkerFleet, store_url: str) -> None:
    """Senders in processes of their own send while the run's waits linger, time out, and
    end their lingers (where the store delivers into a lingering wait, that delivery races
    the wait's own takes, its last take and its timeout's journal entry): every signal is
    taken once, in the order sent, the run never loses its lease, and ends."""
    worker = fleet.start(concurrency=2)
    handle = await app.submit(apps.catch_ticks, count=SPRAYERS * TICKS)
    sprayers = [subprocess.Popen([sys.executable, "-m", "tests.process.signal_sprayer", store_url,
                                  str(handle.id), str(TICKS)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(SPRAYERS)]
    try:
        answers = []
        for sprayer in sprayers:
            out, err = outputs(sprayer, 2 * DEADLINE_S)
            assert sprayer.returncode == 0, err
            answers.append(json.loads(out))
    finally:
        for sprayer in sprayers:
            sprayer.kill()
    assert all("error" not in a for a in answers), answers
    assert sorted(seq for a in answers for seq in a["sent"]) == list(range(1, SPRAYERS * TICKS + 1))
    final = await wait_until(lambda: _done(app, handle.id), "the run takes every tick and ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    signals = await app.signals(handle.id)
    assert [s.payload for s in signals] == final.value()["got"], "each taken once, in the order sent"
    assert len({s.position for s in signals}) == len(signals) and all(not s.pending for s in signals)
    assert await worker.stop() == 0
    # A wait's timeout journaled where a send had delivered (the wait's last take missed
    # it) is refused under the run's own fence: the run is abandoned until its lease ends.
    assert "lease_lost=0" in worker.log(), worker.log()
