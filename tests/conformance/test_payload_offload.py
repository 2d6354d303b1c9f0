"""Payload offloading on every backend: with `Codecs(offload_over=, blobs="file://...")` a
run's large arguments, result, step result and event data are written to the blob store
(compressed and encrypted first) and its rows keep only an envelope naming the blob; every
reader gets the values back; retention's collection deletes the blobs of the runs it
reclaimed and the orphans a crash leaves, never a blob a surviving row names; a missing
blob is one PayloadUnreadable naming it. Worker processes, the CLI and HTTP:
tests/process/test_payload_offload.py. S3: tests/integration/test_payload_offload_s3.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

import runwright as rw
from runwright.core._blobs import FileBlobs, new_name
from runwright.engine._sweeper import Retention, Sweeper
from runwright.store._params import EventListParams, RunReclaimParams

from ..integration.conftest import running_worker

HISTORY = [{"role": "assistant" if i % 2 else "user", "content": f"turn {i}: " + os.urandom(24).hex()}
           for i in range(200)]  # ~14 KB of JSON that zstd cannot shrink below the offload size
ENVELOPE = re.compile(r'^\{"~rw1":"zab\.([\w-]+)\.([0-9a-f]{32})"\}$')


def _codecs(blobs: Path) -> rw.Codecs:
    key_id = f"o-{uuid.uuid4().hex[:10]}"  # keys are the process's: each test its own ids
    return rw.Codecs(compress_over=256, keys={key_id: os.urandom(32)}, encrypt_with=key_id,
                     offload_over=2048, blobs=f"file://{blobs}", blob_grace_s=0)


@contextlib.asynccontextmanager
async def _app(url: str, codecs: rw.Codecs | None) -> AsyncIterator[rw.App]:
    app = rw.App(url, codecs=codecs)

    @app.task(retries=0)
    async def summarize(ctx: rw.Context, history: list[dict[str, Any]]) -> dict[str, Any]:
        kept = await ctx.step("condense", lambda: {"turns": len(history), "all": history})
        await ctx.emit("progress", {"pct": 50, "history": kept["all"]})
        await ctx.emit("small", {"pct": 60})
        return {"summary": len(kept["all"]), "history": history}

    await app.open()
    try:
        yield app
    finally:
        await app.close()


def _blob_of(text: str | None) -> str:
    found = ENVELOPE.match(text or "")
    assert found is not None, f"not an offloaded envelope: {(text or '')[:80]!r}"
    return found.group(2)


def _on_disk(root: Path) -> set[str]:
    if not root.exists():
        return set()
    return {path.name for path in root.rglob("*") if path.is_file() and not path.name.startswith(".")}


async def _offloaded_run(app: rw.App) -> tuple[int, set[str]]:
    handle = await app.submit("summarize", history=HISTORY)
    result = await handle.result(timeout_s=30)
    assert result["history"] == HISTORY and result["summary"] == 200
    raw = await app.store.run_get(handle.id)
    assert raw is not None
    names = {_blob_of(raw.args), _blob_of(raw.result)}
    steps = await app.store.step_list(handle.id)
    names.add(_blob_of(steps[0].result))
    stored = {e.kind: e.data for e in await app.store.event_list(EventListParams(handle.id, 0, 100))}
    names.add(_blob_of(json.dumps(stored["progress"], separators=(",", ":"))))
    assert stored["small"] == {"pct": 60} or list(stored["small"]) == ["~rw1"]  # below the size: in the row
    return handle.id, names


async def _reclaim(app: rw.App, run_id: int) -> None:
    gone = await app.store.run_reclaim(RunReclaimParams(ended_before=time.time() + 3600, run_ids=[run_id]))
    assert gone.run_ids == [run_id]


async def test_large_payloads_are_offloaded_and_read_back_plain(store_url: str, tmp_path: Path):
    tmp_path = tmp_path / "blobs"  # beside a SQLite store's file
    async with _app(store_url, _codecs(tmp_path)) as app, running_worker(app, poll_s=0.05):
        run_id, names = await _offloaded_run(app)
        assert len(names) == 4 and names <= _on_disk(tmp_path)
        for name in names:  # the blobs hold ciphertext, not the history
            assert b"turn 1" not in FileBlobs(str(tmp_path)).get(name)
        got = await app.get(run_id)
        assert got.run.arguments() == {"history": HISTORY} and got.run.value()["summary"] == 200
        steps = await app.store.step_list(run_id)
        assert steps[0].value()["all"] == HISTORY
        seen = {e.kind: e.data for e in await app.events_page(run_id)}
        assert seen["progress"] == {"pct": 50, "history": HISTORY} and seen["small"] == {"pct": 60}


async def test_retention_deletes_the_blobs_of_reclaimed_runs_and_keeps_the_others(store_url: str,
                                                                                   tmp_path: Path):
    tmp_path = tmp_path / "blobs"  # beside a SQLite store's file
    codecs = _codecs(tmp_path)
    async with _app(store_url, codecs) as app, running_worker(app, poll_s=0.05):
        gone_id, gone_names = await _offloaded_run(app)
        kept_id, kept_names = await _offloaded_run(app)
        orphan = new_name()  # what a crash between a blob's write and its row's leaves
        FileBlobs(str(tmp_path)).put(orphan, b"never named")
        await _reclaim(app, gone_id)
        sweeper = Sweeper(app.store, app.runtime.clock, Retention(max_age_s=3600), holder="t", lease_s=60,
                          codecs=codecs)
        report = await sweeper.sweep()
        assert report.blobs == len(gone_names) + 1
        assert _on_disk(tmp_path) == kept_names  # the reclaimed run's and the orphan gone
        got = await app.get(kept_id)  # the surviving run reads as before, all of it
        assert got.run.value()["history"] == HISTORY and got.run.arguments() == {"history": HISTORY}
        assert (await app.store.step_list(kept_id))[0].value()["all"] == HISTORY
        seen = {e.kind: e.data for e in await app.events_page(kept_id)}
        assert seen["progress"]["history"] == HISTORY
        assert (await sweeper.collect_blobs(FileBlobs(str(tmp_path)), 0)) == 0  # nothing left to collect


async def test_a_blob_younger_than_the_grace_is_never_collected(store_url: str, tmp_path: Path):
    tmp_path = tmp_path / "blobs"  # beside a SQLite store's file
    codecs = _codecs(tmp_path)
    async with _app(store_url, codecs) as app:
        sweeper = Sweeper(app.store, app.runtime.clock, Retention(max_age_s=3600), holder="t", lease_s=60)
        young = new_name()  # a payload sealed, its row not yet committed
        FileBlobs(str(tmp_path)).put(young, b"row on its way")
        assert await sweeper.collect_blobs(FileBlobs(str(tmp_path)), grace_s=3600) == 0
        assert _on_disk(tmp_path) == {young}
        assert await sweeper.collect_blobs(FileBlobs(str(tmp_path)), grace_s=0, dry_run=True) == 1
        assert _on_disk(tmp_path) == {young}  # a dry run deletes nothing


async def test_a_missing_blob_is_one_clear_error_naming_it(store_url: str, tmp_path: Path):
    tmp_path = tmp_path / "blobs"  # beside a SQLite store's file
    async with _app(store_url, _codecs(tmp_path)) as app, running_worker(app, poll_s=0.05):
        run_id, _ = await _offloaded_run(app)
        raw = await app.store.run_get(run_id)
        assert raw is not None
        lost = _blob_of(raw.result)
        FileBlobs(str(tmp_path)).delete([lost])
        with pytest.raises(rw.PayloadUnreadable, match=lost) as caught:
            (await app.get(run_id)).run.value()
        assert caught.value.blob == lost
        assert (await app.get(run_id)).run.arguments() == {"history": HISTORY}  # the rest reads


async def test_an_agents_offloaded_thread_history_survives_a_sweep_of_other_runs(store_url: str,
                                                                                 tmp_path: Path):
    """A thread's messages are payloads too: offloaded, read back plain, and their blobs kept
    by a collection (the history lives on in the thread, whatever retention does to runs)."""
    from runwright.store._params import ThreadMessagesParams
    from runwright.testing import ScriptedModel

    tmp_path = tmp_path / "blobs"  # beside a SQLite store's file
    codecs = _codecs(tmp_path)
    question, answer = "q: " + os.urandom(2048).hex(), "a: " + os.urandom(2048).hex()
    async with _app(store_url, codecs) as app:
        app.agent("helper", model=ScriptedModel(answer), instructions="Answer briefly.")
        async with running_worker(app, poll_s=0.05):
            handle = await app.submit("helper", question, thread="t-offload")
            assert await handle.result(timeout_s=30) == answer
            other_id, _ = await _offloaded_run(app)
        rows = await app.store.thread_messages(ThreadMessagesParams("t-offload"))
        messages = {_blob_of(text) for _, _, text in rows}
        assert len(messages) == 2 and messages <= _on_disk(tmp_path)
        await _reclaim(app, other_id)
        sweeper = Sweeper(app.store, app.runtime.clock, Retention(max_age_s=3600), holder="t", lease_s=60,
                          codecs=codecs)
        assert (await sweeper.sweep()).blobs == 4  # the other run's alone
        assert messages <= _on_disk(tmp_path)
        history = await app.thread_history("t-offload")
        assert [(m["role"], m["content"]) for m in history] == [("user", question), ("assistant", answer)]
