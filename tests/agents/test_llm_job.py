"""The llm job: a templated prompt to a model, and a signed callback, on every backend."""

from __future__ import annotations

import json

import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..integration.test_webhook import SECRET, Receiver, verified
from .scripted_openai import Reply, ScriptedOpenAI


def shout(body, index) -> Reply:
    return Reply(content=body["messages"][-1]["content"].upper(), usage=(1000, 100))


async def test_a_templated_prompt_is_answered_and_called_back(app, monkeypatch):
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_ALLOW", "127.0.0.1")  # the operator's, not the job's
    receiver = Receiver(lambda i: (200, "{}", 0))
    try:
        with ScriptedOpenAI(shout) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "test-key")
            async with running_worker(app):
                run = await app.submit("llm", model="openai:gpt-4o-mini", system="Be loud.",
                                       prompt="hello {{input.name}}", input={"name": "ann"},
                                       callback={"url": receiver.url})
                answer = await run.result(timeout_s=30)
    finally:
        receiver.close()
    assert answer["output"] == "HELLO ANN"
    assert answer["cost_usd"] == pytest.approx((1000 * 0.15 + 100 * 0.60) / 1e6)
    assert [m["role"] for m in server.requests[0]["messages"]] == ["system", "user"]
    (callback,) = receiver.requests
    assert verified(callback)
    assert json.loads(callback["body"]) == {"run_id": run.id, **answer}
    assert [s.name for s in await app.store.step_list(run.id)] == ["model", "callback"]


async def test_a_chain_can_feed_an_llm_step(app, monkeypatch):
    @app.task
    async def fetch(ctx: rw.Context, topic: str) -> dict:
        return {"title": f"all about {topic}"}

    with ScriptedOpenAI(shout) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        steps = [{"id": "page", "task": "fetch", "args": {"topic": "{{input}}"}},
                 {"id": "summary", "type": "llm",
                  "args": {"model": "openai:gpt-4o-mini",
                           "prompt": "summarize: {{steps.page.output.title}}"}}]
        async with running_worker(app, concurrency=4):
            outputs = await (await app.submit("chain", steps=steps, input="owls")).result(timeout_s=60)
    assert outputs["summary"]["output"] == "SUMMARIZE: ALL ABOUT OWLS"


async def test_a_placeholder_that_names_nothing_fails_clearly(app):
    steps = [{"id": "a", "type": "llm", "args": {"model": "openai:m", "prompt": "{{input.nope}}"}}]
    async with running_worker(app):
        run = await app.submit("chain", steps=steps, input={"name": "x"})
        with pytest.raises(rw.RunFailed, match="placeholder \\{\\{input.nope\\}\\}: 'nope' is not in"):
            await run.result(timeout_s=30)


async def test_a_callback_cannot_carry_the_operators_settings(app):
    for callback in ({"url": "http://127.0.0.1/x", "allow_private": True},
                     {"url": "http://127.0.0.1/x", "secret_env": "HOME"}, {"headers": {}}):
        with pytest.raises(rw.BadArguments, match="callback"):
            await app.submit("llm", model="openai:gpt-4o-mini", prompt="hi", callback=callback)
    assert await app.list_runs() == []
