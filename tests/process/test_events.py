"""Events awaited by key with real worker and publisher processes, on every backend: runs
waiting on an event across workers get a publisher's event once, across a SIGKILL between
the take of its delivery and the journal entry; two publishers racing with one event id
deliver once and start one run."""

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

from . import apps
from .harness import DEADLINE_S, ROOT, WorkerFleet, outputs, wait_until

pytestmark = pytest.mark.process


async def _all_parked(app: rw.App, handles: list[rw.RunHandle]) -> bool:
    runs = await app.store.run_get_many([h.id for h in handles])
    return len(runs) == len(handles) and all(
        r.state is RunState.QUEUED and r.waiting == WaitReason.SIGNAL for r in runs)


async def _all_done(app: rw.App, ids: list[int]) -> list[rw.Run] | None:
    runs = await app.store.run_get_many(ids)
    return runs if len(runs) == len(ids) and all(r.done for r in runs) else None


def _publishers(store_url: str, go: Path, data: dict, event_id: str, n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-m", "tests.process.event_actors", store_url, str(go),
                              "doc.processed", json.dumps(data), event_id], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(n)]


async def _answers(publishers: list[subprocess.Popen[bytes]], go: Path) -> list[dict]:
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == len(publishers) or any(
            p.poll() is not None for p in publishers), "every publisher is ready", timeout_s=2 * DEADLINE_S)
        assert all(p.poll() is None for p in publishers), "a publisher died before the start"
        go.touch()
        answers = []
        for publisher in publishers:
            out, err = outputs(publisher, 2 * DEADLINE_S)
            assert publisher.returncode == 0, err
            answers.append(json.loads(out))
    finally:
        for publisher in publishers:
            publisher.kill()
    assert all("error" not in a for a in answers), answers
    return answers


async def test_an_event_from_another_process_reaches_each_waiting_run_once_across_a_sigkill(
        app: rw.App, fleet: WorkerFleet, store_url: str, tmp_path: Path) -> None:
    firsts = [fleet.start(concurrency=2) for _ in range(2)]
    matching = [await app.submit(apps.await_doc, doc_id="d1") for _ in range(4)]
    other = [await app.submit(apps.await_doc, doc_id="d2") for _ in range(2)]
    await wait_until(lambda: _all_parked(app, matching + other), "every run parks on its wait")
    for worker in firsts:
        worker.signal(signal.SIGKILL)
        await worker.wait_exit()

    # No worker runs: the publisher, a process of its own, delivers to the waits of d1.
    data = {"doc_id": "d1", "pages": 12}
    (published,) = await _answers(_publishers(store_url, tmp_path / "go", data, "ev-1", 1), tmp_path / "go")
    assert sorted(published["woken"]) == sorted(h.id for h in matching)
    assert (published["full"], published["existed"], len(published["started"])) == ([], False, 1)
    # A worker dies right after it takes a delivery, before the journal says so.
    crashing = fleet.start(concurrency=1,
                           env={"RUNWRIGHT_CRASH_POINTS": "signal.after_take:event:doc.processed=kill"})
    assert await crashing.wait_exit() != 0
    survivors = [fleet.start(concurrency=2) for _ in range(2)]
    ids = [h.id for h in matching] + published["started"]
    ended = await wait_until(lambda: _all_done(app, ids), "the woken runs and the started one end")
    assert all(r.state is RunState.SUCCEEDED for r in ended), [(r.id, r.state, r.error) for r in ended]
    results = {r.id: r.value() for r in ended}
    for handle in matching:
        assert results[handle.id]["event"] == data
        assert len(fleet.events_by_run("prepare")[handle.id]) == 1, "the first step ran once"
        assert len(fleet.events_by_run("after")[handle.id]) == 1, "the step after the wait ran once"
        (delivered,) = await app.signals(handle.id)
        assert (delivered.payload, delivered.pending) == (data, False), "delivered once, and taken"
    assert results[published["started"][0]] == {"indexed": "d1"}
    assert len(fleet.events_by_run("index")) == 1, "the event started one run"

    # The runs waiting for d2 sleep on; the same id again delivers and starts nothing.
    assert await _all_parked(app, other)
    again = await app.publish_event("doc.processed", data, id="ev-1")
    assert (again.existed, sorted(again.woken), again.started) == (True, sorted(published["woken"]), [])
    finished = await app.publish_event("doc.processed", {"doc_id": "d2"})
    assert sorted(finished.woken) == sorted(h.id for h in other) and len(finished.started) == 1
    ended = await wait_until(lambda: _all_done(app, [h.id for h in other]), "the d2 runs end")
    assert [r.value()["event"] for r in ended] == [{"doc_id": "d2"}] * 2
    for worker in survivors:
        assert await worker.stop() == 0


async def test_two_publishers_racing_with_one_event_id_deliver_once_and_start_one_run(
        app: rw.App, fleet: WorkerFleet, store_url: str, tmp_path: Path) -> None:
    worker = fleet.start(concurrency=4)
    waiting = [await app.submit(apps.await_doc, doc_id="r1") for _ in range(3)]
    await wait_until(lambda: _all_parked(app, waiting), "every run parks on its wait")
    data = {"doc_id": "r1"}
    answers = await _answers(_publishers(store_url, tmp_path / "go", data, "race-1", 2), tmp_path / "go")
    assert sorted(a["existed"] for a in answers) == [False, True], "one publish delivered"
    assert all(sorted(a["woken"]) == sorted(h.id for h in waiting) for a in answers)
    started = [run_id for a in answers for run_id in a["started"]]
    assert len(started) == 1, "one run started for the event id"
    ended = await wait_until(lambda: _all_done(app, [h.id for h in waiting] + started), "the runs end")
    assert all(r.state is RunState.SUCCEEDED for r in ended), [(r.id, r.state, r.error) for r in ended]
    for handle in waiting:
        assert [s.payload for s in await app.signals(handle.id)] == [data], "delivered once"
    assert len(fleet.events_by_run("index")) == 1
    assert await worker.stop() == 0
