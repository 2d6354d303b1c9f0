"""Questions a run asks a person, and their answers: the same on every backend."""

from __future__ import annotations

import json

import pytest

from runwright.errors import (
    AlreadyAnswered,
    InvalidInput,
    QuestionNotFound,
    RunEnded,
    RunNotFound,
    ThreadBusy,
)
from runwright.runs import RunState
from runwright.store._params import (
    EventListParams,
    QuestionAnswerParams,
    QuestionListParams,
    QuestionOpenParams,
    RunCancelParams,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    ThreadAppendParams,
    ThreadMessagesParams,
)

from .helpers import T0, claim, insert, worker

YES_NO = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def body(text: str = "Ship it?", schema: dict | None = YES_NO) -> str:
    return json.dumps({"text": text, "schema": schema})


async def _running(store, tenant: str | None = None):
    wid = await store.worker_register(worker())
    params = insert()
    params.tenant = tenant
    (run,) = await store.run_insert_many([params])
    (claimed,) = await store.run_claim(claim(wid))
    return wid, claimed


async def _park(store, run, now: float = T0 + 1) -> None:
    """What the executor does when ctx.ask raises Park: give the slot back for an hour."""
    assert await store.run_finish_many([RunFinishParams(
        run.id, run.fence, RunState.QUEUED, release=True, run_at=now + 3600, event_kind="parked",
        event_data='{"reason": "answer"}', now=now)]) == []


def answer(run_id: int, value, position: int = 0, by: str = "ana", tenant: str | None = None,
           now: float = T0 + 2) -> QuestionAnswerParams:
    return QuestionAnswerParams(run_id, position, json.dumps(value), by, tenant, now=now)


async def kinds(store, run_id: int) -> list[str]:
    return [e.kind for e in await store.event_list(EventListParams(run_id, 0, 100))]


async def test_a_question_is_asked_once_per_position(store):
    _, run = await _running(store)
    first = await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body(), now=T0))
    again = await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question",
                                                         body("changed?"), now=T0 + 5))
    assert first is not None and again == first
    assert (first.run_id, first.id, first.text, first.asked_at, first.answered) == (
        run.id, 0, "Ship it?", T0, False)
    assert first.schema == YES_NO
    assert (await kinds(store, run.id)).count("asked") == 1


async def test_a_superseded_owner_cannot_ask(store):
    _, run = await _running(store)
    await store.run_rescue_many(RunRescueParams(now=T0 + 60, worker_stale_s=1e9))
    wid = await store.worker_register(worker())
    (retaken,) = await store.run_claim(claim(wid, now=T0 + 60))
    assert retaken.fence == run.fence + 1
    refused = await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body()))
    assert refused is None
    assert await store.question_list(QuestionListParams(run_id=run.id, pending=False)) == []
    assert "asked" not in await kinds(store, run.id)


async def test_an_answer_wakes_a_parked_run_at_once(store):
    wid, run = await _running(store)
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body(), now=T0))
    await _park(store, run)
    assert await store.run_claim(claim(wid, now=T0 + 2)) == []  # parked for an hour
    answered = await store.question_answer(answer(run.id, {"approved": True}))
    assert (answered.answer, answered.answered_by, answered.answered_at) == (
        {"approved": True}, "ana", T0 + 2)
    (resumed,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert resumed.id == run.id
    # The resumed attempt finds the question answered at the same position.
    again = await store.question_open(QuestionOpenParams(run.id, resumed.fence, 0, "question", body()))
    assert again == answered
    assert (await kinds(store, run.id))[-3:] == ["parked", "answered", "started"]


async def test_an_answer_before_the_park_lands_still_wakes_the_run(store):
    wid, run = await _running(store)
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body(), now=T0))
    await store.question_answer(answer(run.id, {"approved": False}, now=T0 + 1))  # still running
    await _park(store, run, now=T0 + 1.5)
    (resumed,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert resumed.id == run.id


async def test_answering_is_idempotent_and_written_once(store):
    _, run = await _running(store)
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body(), now=T0))
    first = await store.question_answer(answer(run.id, {"approved": True}))
    same = await store.question_answer(answer(run.id, {"approved": True}, by="bo", now=T0 + 9))
    assert same == first  # the same value again: accepted, nothing changed
    with pytest.raises(AlreadyAnswered, match="answered already"):
        await store.question_answer(answer(run.id, {"approved": False}, by="bo"))
    assert (await kinds(store, run.id)).count("answered") == 1


async def test_bad_answers_are_refused_and_change_nothing(store):
    _, run = await _running(store)
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body(), now=T0))
    with pytest.raises(InvalidInput, match="approved"):
        await store.question_answer(answer(run.id, {"approved": "maybe"}))
    with pytest.raises(InvalidInput):
        await store.question_answer(answer(run.id, "yes"))
    with pytest.raises(QuestionNotFound):
        await store.question_answer(answer(run.id, {"approved": True}, position=7))
    with pytest.raises(RunNotFound):
        await store.question_answer(answer(run.id + 1000, {"approved": True}))
    (pending,) = await store.question_list(QuestionListParams(run_id=run.id))
    assert not pending.answered
    assert "answered" not in await kinds(store, run.id)


async def test_a_question_of_an_ended_run_cannot_be_answered(store):
    _, run = await _running(store)
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", body(), now=T0))
    await _park(store, run)
    await store.run_cancel(RunCancelParams(run.id, now=T0 + 2))
    with pytest.raises(RunEnded, match="cancelled"):
        await store.question_answer(answer(run.id, {"approved": True}, now=T0 + 3))
    assert await store.question_list(QuestionListParams()) == []  # an ended run waits for nothing


async def test_pending_questions_are_listed_oldest_first_within_a_tenant(store):
    wid = await store.worker_register(worker())
    runs = []
    for tenant in ("acme", "acme", "other"):
        params = insert()
        params.tenant = tenant
        await store.run_insert_many([params])
        (run,) = await store.run_claim(claim(wid))
        runs.append(run)
    a, b, c = runs
    await store.question_open(QuestionOpenParams(b.id, b.fence, 0, "approval", body("b?"), now=T0 + 1))
    await store.question_open(QuestionOpenParams(a.id, a.fence, 3, "question", body("a?"), now=T0 + 2))
    await store.question_open(QuestionOpenParams(c.id, c.fence, 0, "question", body("c?"), now=T0 + 3))
    await store.question_open(QuestionOpenParams(a.id, a.fence, 5, "question", body("a2?"), now=T0 + 4))
    await store.question_answer(answer(a.id, {"approved": True}, position=5))

    everyone = await store.question_list(QuestionListParams())
    assert [(q.run_id, q.id) for q in everyone] == [(b.id, 0), (a.id, 3), (c.id, 0)]
    assert everyone[0].kind == "approval"
    acme = await store.question_list(QuestionListParams(tenant="acme"))
    assert [(q.run_id, q.id) for q in acme] == [(b.id, 0), (a.id, 3)]
    of_a = await store.question_list(QuestionListParams(run_id=a.id, pending=False))
    assert [(q.id, q.answered) for q in of_a] == [(3, False), (5, True)]
    with pytest.raises(RunNotFound):  # another tenant's run, as if it did not exist
        await store.question_answer(answer(c.id, {"approved": True}, tenant="acme"))


def threaded(key: str, on_busy: str) -> RunInsertParams:
    return RunInsertParams(key=key, task="t", args="{}", thread="chat", on_busy=on_busy, now=T0)


@pytest.mark.parametrize("on_busy", ["reject", "enqueue", "interrupt", "rollback"])
async def test_a_run_waiting_on_a_person_leaves_its_thread_free(store, on_busy):
    wid = await store.worker_register(worker())
    first = await store.run_insert_threaded(threaded("first", "reject"))
    (run,) = await store.run_claim(claim(wid))
    assert await store.thread_append(ThreadAppendParams(run.id, run.fence, "chat", 0, '"asked"'))
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "approval", body(), now=T0))
    with pytest.raises(ThreadBusy):  # still running (its park on its way): busy as ever
        await store.run_insert_threaded(threaded("early", "reject"))
    await _park(store, run)

    second = await store.run_insert_threaded(threaded("second", on_busy))
    ended = await store.run_get(first.id)
    assert ended.state is RunState.INTERRUPTED, "the next message supersedes the waiting run"
    assert ended.interrupt == ("rollback" if on_busy == "rollback" else "interrupt")
    (claimed,) = await store.run_claim(claim(wid, now=T0 + 2))
    assert claimed.id == second.id
    history = [m for _, _, m in await store.thread_messages(ThreadMessagesParams("chat"))]
    assert history == ([] if on_busy == "rollback" else ['"asked"'])
    with pytest.raises(RunEnded):
        await store.question_answer(answer(first.id, {"approved": True}, now=T0 + 3))


async def test_an_answered_question_no_longer_frees_the_thread(store):
    wid = await store.worker_register(worker())
    await store.run_insert_threaded(threaded("first", "reject"))
    (run,) = await store.run_claim(claim(wid))
    await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "approval", body(), now=T0))
    await _park(store, run)
    await store.question_answer(answer(run.id, {"approved": True}))
    with pytest.raises(ThreadBusy):  # it goes on now: the thread is busy with it
        await store.run_insert_threaded(threaded("second", "reject"))
