"""An interrupt cuts the model call in flight, on every backend: the HTTP request is
dropped, no partial reply is kept, and the newer run on the thread starts at once."""

from __future__ import annotations

import time

import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..process.harness import wait_until
from .scripted_openai import Reply, ScriptedOpenAI
from .test_agents import model_at

SLOW_S = 300.0  # the slow call's reply comes this late: far past every wait below


async def test_an_interrupt_cuts_the_model_call_in_flight(app):
    def script(body, index) -> Reply:
        if body["messages"][-1]["content"] == "think hard":
            return Reply(content="a late answer", delay_s=SLOW_S)
        return Reply(content="a quick answer")

    with ScriptedOpenAI(script) as server:
        app.agent("chat", model=model_at(server))
        async with running_worker(app):
            first = await app.submit("chat", input="think hard", thread="t")
            await wait_until(lambda: server.requests, "the slow model call is in flight")
            asked = time.monotonic()
            second = await app.submit("chat", input="never mind", thread="t", on_busy="interrupt")
            # Without the cut, the newer run could start only once the slow call returned,
            # SLOW_S from now: its result within a fraction of that shows it did not wait.
            assert await second.result(timeout_s=SLOW_S / 5) == "a quick answer"
            print(f"interrupt to the next run's answer: {time.monotonic() - asked:.3f} s")
    ended = await first.refresh()
    assert ended.state is rw.RunState.INTERRUPTED
    assert [s.name for s in await app.store.step_list(first.id)] == ["thread:history"], \
        "the cut model call left no journaled reply"
    history = await app.thread_history("t")
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "think hard"), ("user", "never mind"), ("assistant", "a quick answer")], \
        "no partial assistant message of the cut call"
    assert len(server.requests) == 2, "the cut call was not made again"


@pytest.mark.parametrize("mode", ["interrupt", "rollback"])
async def test_an_interrupt_runs_next_and_the_waiting_messages_run_after_it_in_order(app, mode):
    """Seed 002, executed by a worker: while a run's model call is in flight, two messages
    wait on its thread (enqueue), then a third comes with `mode`. The running run ends
    `interrupted`; the third runs next; the two waiting ones run after it, in order, and
    end `succeeded` (never interrupted), each seeing the conversation so far."""
    def script(body, index) -> Reply:
        said = body["messages"][-1]["content"]
        if said == "think hard":
            return Reply(content="a late answer", delay_s=SLOW_S)
        return Reply(content=f"re: {said}")

    with ScriptedOpenAI(script) as server:
        app.agent("chat", model=model_at(server))
        first = await app.submit("chat", input="think hard", thread="t")
        async with running_worker(app):
            await wait_until(lambda: server.requests, "the slow model call is in flight")
            waiting = [await app.submit("chat", input=text, thread="t", on_busy="enqueue")
                       for text in ("e1", "e2")]
            newest = await app.submit("chat", input="now", thread="t", on_busy=mode)
            for handle in waiting:
                await handle.result(timeout_s=SLOW_S / 5)
            assert await newest.result(timeout_s=5) == "re: now"
    assert (await first.refresh()).state is rw.RunState.INTERRUPTED
    for handle in (newest, *waiting):
        ended = await handle.refresh()
        assert ended.state is rw.RunState.SUCCEEDED and ended.interrupt is None
    # The model was asked in the order the runs took their turns, each with what came before.
    asked = [[m["content"] for m in body["messages"] if m["role"] == "user"] for body in server.requests]
    before = ["think hard"] if mode == "interrupt" else []
    assert asked == [["think hard"], [*before, "now"], [*before, "now", "e1"], [*before, "now", "e1", "e2"]]
    history = await app.thread_history("t")
    assert [m["content"] for m in history] == [
        *before, "now", "re: now", "e1", "re: e1", "e2", "re: e2"]
    started = [(await handle.refresh()).started_at for handle in (newest, *waiting)]
    assert started == sorted(started)
