"""Payload codecs on every backend: a run submitted with codecs on keeps its arguments,
result, journal and emitted events compressed and encrypted in the store, and every
reader gets the values back; a key added later (rotation) leaves old rows readable; a
payload under a key id this process lacks ends its run with one clear error naming it.
Worker processes of their own, the CLI and HTTP: tests/process/test_payload_codecs.py."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any, AsyncIterator

import pytest

import runwright as rw
from runwright.store._params import EventListParams
from runwright.tasks._limits import Limits

from ..integration.conftest import running_worker

HISTORY = [{"role": "assistant" if i % 2 else "user", "content": f"turn {i}: " + "lorem ipsum dolor " * 20}
           for i in range(40)]


def _key_id() -> str:  # keys are the process's (one keyring): each test its own ids
    return f"c-{uuid.uuid4().hex[:10]}"


@contextlib.asynccontextmanager
async def _app(url: str, codecs: rw.Codecs | None) -> AsyncIterator[rw.App]:
    app = rw.App(url, codecs=codecs)

    @app.task(retries=0)
    async def summarize(ctx: rw.Context, history: list[dict[str, Any]]) -> dict[str, Any]:
        kept = await ctx.step("condense", lambda: {"turns": len(history), "last": history[-1]})
        await ctx.emit("progress", {"pct": 50, "last": kept["last"]["content"]})
        return {"summary": kept, "history": history}

    await app.open()
    try:
        yield app
    finally:
        await app.close()


def _sealed(text: str | None, key_id: str) -> bool:
    """Stored as an envelope (zstd, then AES-GCM under `key_id`), with no plain text in it."""
    return text is not None and text.startswith(f'{{"~rw1":"za.{key_id}.') and "lorem" not in text


async def test_a_run_with_codecs_is_stored_sealed_and_read_back_plain(store_url: str):
    key_id = _key_id()
    codecs = rw.Codecs(compress_over=256, keys={key_id: os.urandom(32)}, encrypt_with=key_id)
    async with _app(store_url, codecs) as app, running_worker(app, poll_s=0.05):
        handle = await app.submit("summarize", history=HISTORY)
        result = await handle.result(timeout_s=30)
        assert result["history"] == HISTORY and result["summary"]["turns"] == 40
        raw = await app.store.run_get(handle.id)
        assert raw is not None and _sealed(raw.args, key_id) and _sealed(raw.result, key_id)
        assert raw.arguments() == {"history": HISTORY}
        steps = await app.store.step_list(handle.id)
        assert [s.name for s in steps] == ["condense"] and _sealed(steps[0].result, key_id)
        assert steps[0].value()["turns"] == 40
        stored = {e.kind: e.data for e in await app.store.event_list(EventListParams(handle.id, 0, 100))}
        assert list(stored["progress"]) == ["~rw1"] and "lorem" not in json.dumps(stored["progress"])
        seen = {e.kind: e.data for e in await app.events_page(handle.id)}
        assert seen["progress"] == {"pct": 50, "last": HISTORY[-1]["content"]}
        assert seen["submitted"]["task"] == "summarize"  # runwright's own events stay plain


async def test_rows_sealed_under_an_old_key_read_after_rotation(store_url: str):
    old_id, new_id = _key_id(), _key_id()
    old_key, new_key = os.urandom(32), os.urandom(32)
    async with _app(store_url, rw.Codecs(keys={old_id: old_key}, encrypt_with=old_id)) as before:
        first = await before.submit("summarize", history=HISTORY)
    rotated = rw.Codecs(keys={new_id: new_key, old_id: old_key}, encrypt_with=new_id)
    async with _app(store_url, rotated) as app, running_worker(app, poll_s=0.05):
        second = await app.submit("summarize", history=HISTORY[:3])
        assert (await app.get(first.id)).run.arguments() == {"history": HISTORY}
        assert (await (await app.get(first.id)).result(timeout_s=30))["history"] == HISTORY
        assert (await second.result(timeout_s=30))["history"] == HISTORY[:3]
        old, new = await app.store.run_get(first.id), await app.store.run_get(second.id)
        assert old is not None and new is not None
        assert _sealed(old.args, old_id) and _sealed(old.result, new_id) and _sealed(new.args, new_id)


async def test_a_payload_under_a_key_this_process_lacks_is_one_clear_error(store_url: str):
    missing = _key_id()
    elsewhere = rw.Codecs(keys={missing: os.urandom(32)}, encrypt_with=missing)  # never given to this process
    async with _app(store_url, None) as app:
        # Submitted as a process that holds the key would: its limits seal under it.
        object.__setattr__(app.runtime, "limits", Limits(codecs=elsewhere))
        handle = await app.submit("summarize", history=HISTORY)
        object.__setattr__(app.runtime, "limits", Limits())
        with pytest.raises(rw.PayloadUnreadable, match=missing):
            (await app.get(handle.id)).run.arguments()
        async with running_worker(app, poll_s=0.05):
            with pytest.raises(rw.RunFailed) as ended:
                await handle.result(timeout_s=30)
        error = ended.value.error or {}
        assert error.get("type") == "PayloadUnreadable" and missing in error.get("message", "")
        # HTTP: one problem naming the key id, not a traceback.
        problem = await _http_get(app, f"/runs/{handle.id}")
        assert (problem["status"], problem["title"]) == (500, "Payload unreadable")
        assert missing in problem["detail"]


async def _http_get(app: rw.App, path: str) -> Any:
    import httpx

    from runwright.server import Auth
    from runwright.server._factory import create_server

    api = create_server(app, Auth(operators=frozenset({"op"})))
    transport = httpx.ASGITransport(api, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://runwright",
                                 headers={"Authorization": "Bearer op"}) as http:
        return (await http.get(path)).json()


async def test_without_codecs_nothing_changes(store_url: str):
    async with _app(store_url, None) as app, running_worker(app, poll_s=0.05):
        handle = await app.submit("summarize", history=HISTORY[:2])
        await handle.result(timeout_s=30)
        raw = await app.store.run_get(handle.id)
        assert raw is not None and raw.args == json.dumps({"history": HISTORY[:2]}, separators=(",", ":"))
        steps = await app.store.step_list(handle.id)
        assert json.loads(steps[0].result or "") == {"turns": 2, "last": HISTORY[1]}



async def test_an_agents_thread_history_is_stored_sealed_and_read_back_plain(store_url: str):
    from runwright.store._params import ThreadMessagesParams
    from runwright.testing import ScriptedModel

    key_id = _key_id()
    codecs = rw.Codecs(compress_over=None, keys={key_id: os.urandom(32)}, encrypt_with=key_id)
    async with _app(store_url, codecs) as app:
        app.agent("helper", model=ScriptedModel("lorem: the answer"), instructions="Answer briefly.")
        async with running_worker(app, poll_s=0.05):
            handle = await app.submit("helper", "lorem: the question?", thread="t-codecs")
            assert await handle.result(timeout_s=30) == "lorem: the answer"
        history = await app.thread_history("t-codecs")
        assert [(m["role"], m["content"]) for m in history] == [
            ("user", "lorem: the question?"), ("assistant", "lorem: the answer")]
        rows = await app.store.thread_messages(ThreadMessagesParams("t-codecs"))
        assert rows and all(_sealed_as(text, f"a.{key_id}.") for _, _, text in rows)
        model_events = [e.data for e in await app.events_page(handle.id) if e.kind == "model"]
        assert model_events and "~rw1" not in model_events[0]  # the agent's own events read plain
        in_thread = [e.data for e in await app.thread_events_page("t-codecs") if e.kind == "model"]
        assert in_thread == model_events  # the thread's log too


def _sealed_as(text: str, header: str) -> bool:
    return text.startswith('{"~rw1":"' + header) and "lorem" not in text


async def test_a_key_names_the_same_run_whatever_the_ciphertext(store_url: str):
    """Each encryption of the same arguments differs (a fresh nonce): a key's conflict check
    compares the values, so a second submission of them gets the run, and other ones conflict."""
    key_id = _key_id()
    codecs = rw.Codecs(keys={key_id: os.urandom(32)}, encrypt_with=key_id)
    async with _app(store_url, codecs) as app:
        first = await app.submit("summarize", history=HISTORY[:2], key="same")
        again = await app.submit("summarize", history=HISTORY[:2], key="same")
        assert again.id == first.id and again.run.existed
        with pytest.raises(rw.KeyConflict, match="other arguments"):
            await app.submit("summarize", history=HISTORY[:3], key="same")
