"""An interrupt cuts the model call in flight, on every backend: the HTTP request is
dropped, no partial reply is kept, and the newer run on the thread starts at once."""

from __future__ import annotations

import time

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
