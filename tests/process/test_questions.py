"""A run that asks a person, with real worker processes on every backend: it parks (its
slot is free for other runs), survives the death of every worker while it waits, and an
answer given from another process resumes it where it stood, each step once."""

from __future__ import annotations

import signal

import pytest

import runwright as rw
from runwright.runs import RunState
from runwright.store._params import EventListParams

from . import apps
from .harness import WorkerFleet, wait_until

pytestmark = pytest.mark.process


async def test_an_answer_from_another_process_resumes_a_parked_run(app: rw.App, fleet: WorkerFleet) -> None:
    first = fleet.start(concurrency=1)
    handle = await app.submit(apps.ask_deploy, target="prod")
    (question,) = await wait_until(lambda: app.questions(), "the run asks its question")
    assert (question.run_id, question.kind, question.text) == (handle.id, "question", "Deploy prod?")
    assert question.schema == {"type": "boolean"}
    parked = await wait_until(lambda: _parked(app, handle.id), "the run parks")
    assert (parked.state, parked.owner) == (RunState.QUEUED, None), "a waiting run holds no slot"

    # Its one slot is free: another run goes through while the question waits.
    other = await app.submit(apps.record, n=1)
    assert (await wait_until(lambda: _done(app, other.id), "another run ends")).state is RunState.SUCCEEDED

    # Every worker dies while it waits; the question and its run stay as they were.
    first.signal(signal.SIGKILL)
    await first.wait_exit()
    with pytest.raises(rw.InvalidInput, match="boolean"):
        await app.answer(handle.id, question.id, "yes please")
    answered = await app.answer(handle.id, question.id, True, by="ana")
    assert (answered.answer, answered.answered_by) == (True, "ana")
    assert await app.questions() == [], "nothing waits any more"

    second = fleet.start(concurrency=1)
    final = await wait_until(lambda: _done(app, handle.id), "the answered run ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    assert final.value() == {"target": "prod", "approved": True, "pid": second.pid}
    assert fleet.events_by_run("prepare")[handle.id] == [(1, first.pid)], "the first step ran once"
    assert fleet.events_by_run("deploy")[handle.id] == [(2, second.pid)], "the last step ran once, after"
    kinds = [e.kind for e in await app.store.event_list(EventListParams(handle.id))]
    assert kinds.count("asked") == 1 and kinds.count("answered") == 1
    assert (await app.answer(handle.id, question.id, True, by="ana")) == answered, \
        "the same answer again (a retried request) is accepted, even after the run ended"
    with pytest.raises(rw.AlreadyAnswered):
        await app.answer(handle.id, question.id, False)
    assert await second.stop() == 0


async def _parked(app: rw.App, run_id: int) -> rw.Run | None:
    parked = any(e.kind == "parked" for e in await app.store.event_list(EventListParams(run_id)))
    return await app.store.run_get(run_id) if parked else None


async def _done(app: rw.App, run_id: int) -> rw.Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None
