"""Streamed tokens across a retried model call: the log says which text is void, and a
follower's folded text is exactly the final message, also when it reconnects mid-stream."""

from __future__ import annotations

import runwright as rw
from runwright.store._params import EventListParams

from ..integration.conftest import running_worker
from .scripted_openai import Reply, ScriptedOpenAI
from .test_agents import model_at

TEXT = "".join(f"word{n:03d} " for n in range(90))  # 720 characters


def cut_once(body, index) -> Reply:
    # The first request is cut after 300 characters (200 of them flushed as a tokens
    # event, the coalescing threshold); the retry answers in full.
    return Reply(content=TEXT, cut_after=300) if index == 0 else Reply(content=TEXT)


async def test_a_stream_cut_mid_way_is_reset_and_folds_to_the_final_message(app):
    with ScriptedOpenAI(cut_once) as server:
        app.agent("talker", model=model_at(server), stream=True)
        async with running_worker(app):
            handle = await app.submit("talker", input="x")
            assert await handle.result(timeout_s=30) == TEXT
    assert len(server.requests) == 2  # one cut, one retried in full
    events = await app.store.event_list(EventListParams(handle.id))
    streamed = [e for e in events if e.kind in ("tokens", "tokens_reset")]
    first = [e.data["text"] for e in streamed if e.kind == "tokens" and e.data["attempt"] == 1]
    second = [e.data["text"] for e in streamed if e.kind == "tokens" and e.data["attempt"] == 2]
    assert first and "".join(second) == TEXT  # the cut attempt did stream something
    assert "".join(e.data.get("text", "") for e in streamed) != TEXT  # raw concatenation is wrong
    resets = [i for i, e in enumerate(streamed) if e.kind == "tokens_reset"]
    assert len(resets) == 1 and streamed[resets[0] - 1].data["attempt"] == 1
    assert streamed[resets[0]].data == {"turn": 1, "call": 0, "fence": 1, "attempt": 2}
    assert rw.TokenText(events).text == TEXT
    model = next(e for e in events if e.kind == "model")
    assert all(e.seq < model.seq for e in streamed)


async def test_a_follower_that_reconnects_mid_stream_sees_exactly_the_rest(app):
    def slow_then_cut(body, index) -> Reply:
        return Reply(content=TEXT, cut_after=300 if index == 0 else None, chunk_delay_s=0.01)

    with ScriptedOpenAI(slow_then_cut) as server:
        app.agent("talker", model=model_at(server), stream=True)
        async with running_worker(app):
            handle = await app.submit("talker", input="x")
            folded, seen = rw.TokenText(), []
            async for item in handle.events():  # the first connection: until a token arrives
                seen.append(item.seq)
                if folded.add(item):
                    break
            async for item in handle.events(after=seen[-1]):  # reconnected
                seen.append(item.seq)
                folded.add(item)
            assert await handle.result(timeout_s=30) == TEXT
    assert seen == list(range(1, seen[-1] + 1))  # no gap, no repeat
    assert folded.text == TEXT
    kinds = [e.kind for e in await app.store.event_list(EventListParams(handle.id))]
    assert "tokens_reset" in kinds and len(kinds) == len(seen)

