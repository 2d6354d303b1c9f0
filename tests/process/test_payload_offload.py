"""Payload offloading across a deployment's processes, on every real backend: a worker
process configured by RUNWRIGHT_PAYLOAD_* alone (keys, compression, a file blob store,
an offload size) runs an agent-like run whose arguments and result are large; the rows in
the database hold only envelopes naming blobs; this process (same config), an HTTP server
process and CLI processes read the values plain; `runwright sweep` reclaims the run and
deletes its blobs; a CLI process without the blob store meets one clear line."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

import runwright as rw

from . import codec_apps
from .harness import ROOT, WorkerFleet, outputs, start_server, wait_until

pytestmark = pytest.mark.process

APP_SPEC = "tests.process.codec_apps:app"
# ~18 KB of JSON that zstd cannot shrink below the offload size (random text, as tool output is to it).
HISTORY = [{"role": "assistant" if i % 2 else "user", "content": f"turn {i}: " + os.urandom(32).hex()}
           for i in range(200)]
OPERATOR = "offload-operator"
ENVELOPE = re.compile(r'^\{"~rw1":"zab\.([\w-]+)\.([0-9a-f]{32})"\}$')


GRACE_S = 2  # the blobs' grace in these tests: long enough for a row to follow its blob


def _env(blobs: Path) -> dict[str, str]:
    key_id = f"off-{uuid.uuid4().hex[:8]}"
    return {"RUNWRIGHT_PAYLOAD_KEYS": f"{key_id}={base64.b64encode(os.urandom(32)).decode()}",
            "RUNWRIGHT_PAYLOAD_COMPRESS_OVER": "1024", "RUNWRIGHT_PAYLOAD_BLOBS": f"file://{blobs}",
            "RUNWRIGHT_PAYLOAD_OFFLOAD_OVER": "4096", "RUNWRIGHT_PAYLOAD_BLOB_GRACE_S": str(GRACE_S)}


def _blob_of(text: str | None) -> str:
    found = ENVELOPE.match(text or "")
    assert found is not None, f"not an offloaded envelope: {(text or '')[:80]!r}"
    return found.group(2)


def _on_disk(root: Path) -> set[str]:
    return {path.name for path in root.rglob("*") if path.is_file() and not path.name.startswith(".")}


async def _past_the_grace(root: Path, names: set[str], grace_s: float) -> None:
    """Until each blob of `names` was written more than `grace_s` ago: a collection judges
    only those (a fast machine reaches the next sweep within the grace of the last write)."""
    paths = [path for path in root.rglob("*") if path.name in names]
    newest = max((path.stat().st_mtime for path in paths), default=0.0)
    await wait_until(lambda: time.time() > newest + grace_s + 0.05, "the blobs are past the grace")


async def test_a_worker_process_offloads_and_every_face_reads_it_plain_and_retention_deletes_it(
        store_url: str, fleet: WorkerFleet, tmp_path: Path):
    blobs = tmp_path / "blobs"
    env = _env(blobs)
    app = rw.App(store_url, codecs=rw.Codecs.from_env(env))  # this process: the deployment's config
    app.tasks.update(codec_apps.app.tasks)  # to submit by name: it runs none of them
    await app.open()
    server = start_server(store_url, fleet.logs, APP_SPEC, {**env, "RUNWRIGHT_OPERATOR_TOKENS": OPERATOR})
    try:
        handle = await app.submit("agent_turns", history=HISTORY)
        fleet.start(concurrency=2, app_spec=APP_SPEC, env=env)
        result = await handle.result(timeout_s=60)
        assert result["history"][:-1] == HISTORY and result["answer"] == "200 turns read"
        raw = await app.store.run_get(handle.id)
        assert raw is not None and len(raw.args) < 100 and len(raw.result or "") < 100  # the envelope alone
        names = {_blob_of(raw.args), _blob_of(raw.result)}  # args written here, the result by the worker
        assert names <= _on_disk(blobs)
        async with httpx.AsyncClient(base_url=await server.wait_listening(), timeout=60,
                                     headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
            got = (await http.get(f"/runs/{handle.id}")).json()
            assert got["args"] == {"history": HISTORY} and got["result"]["history"][:-1] == HISTORY
        code, said = await asyncio.to_thread(_cli, store_url, env, "show", str(handle.id), "--json",
                                             "--decode")
        assert code == 0, said
        shown = json.JSONDecoder().raw_decode(said)[0]["run"]  # the decode's audit line follows it
        assert shown["result"]["history"][:-1] == HISTORY and shown["args"] == {"history": HISTORY}
        # Without the blob store: one line naming what to set, a ConfigError's exit.
        reader = {k: v for k, v in env.items() if k not in ("RUNWRIGHT_PAYLOAD_BLOBS",
                                                            "RUNWRIGHT_PAYLOAD_OFFLOAD_OVER")}
        code, said = await asyncio.to_thread(_cli, store_url, reader, "show", str(handle.id), "--json",
                                           "--decode")
        assert code == 2 and "RUNWRIGHT_PAYLOAD_BLOBS" in said and "Traceback" not in said, said
        # Retention: the run goes, and its blobs with it.
        await _past_the_grace(blobs, names, GRACE_S)
        code, said = await asyncio.to_thread(_cli, store_url, env, "sweep", "--max-age-s", "0.001", "--json")
        assert code == 0, said
        report = json.loads(said)
        assert handle.id in report["run_ids"] and report["blobs"] >= 2
        assert not names & _on_disk(blobs)
    finally:
        server.kill()
        await app.close()


def _cli(store_url: str, env: dict[str, str], *args: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNWRIGHT_PAYLOAD_")}
    proc = subprocess.Popen([sys.executable, "-m", "runwright", *args, "--url", store_url], cwd=ROOT,
                            env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = outputs(proc, 120)
    return proc.returncode, out + err


async def test_sweeps_racing_workers_never_delete_a_blob_a_surviving_row_names(
        store_url: str, fleet: WorkerFleet, tmp_path: Path):
    """Two worker processes write offloaded results while `runwright sweep` processes reclaim
    and collect over and over (grace 2 s): every run left reads whole, and once the grace has
    passed a last sweep leaves exactly the blobs the rows name."""
    blobs = tmp_path / "blobs"
    env = _env(blobs)
    app = rw.App(store_url, codecs=rw.Codecs.from_env(env))
    app.tasks.update(codec_apps.app.tasks)
    await app.open()
    try:
        fleet.start(concurrency=4, app_spec=APP_SPEC, env=env)
        fleet.start(concurrency=4, app_spec=APP_SPEC, env=env)
        handles, sweeps = [], 0
        for batch in range(6):
            handles += [await app.submit("agent_turns", history=HISTORY[: 120 + batch]) for _ in range(5)]
            code, said = await asyncio.to_thread(_cli, store_url, env, "sweep", "--max-age-s", "1", "--json")
            assert code == 0, said
            sweeps += 1
        handles += [await app.submit("agent_turns", history=HISTORY) for _ in range(5)]  # swept by none
        for handle in handles:
            with contextlib.suppress(rw.RunNotFound):  # RunExpired too: reclaimed after it ended
                await handle.result(timeout_s=60)
        await _past_the_grace(blobs, _on_disk(blobs), GRACE_S)  # every orphan is now collectable
        code, said = await asyncio.to_thread(_cli, store_url, env, "sweep", "--max-age-s", "3600", "--json")
        assert code == 0, said
        survivors = 0
        for handle in handles:
            try:
                got = await app.get(handle.id)
            except rw.RunNotFound:
                continue
            survivors += 1
            assert got.run.arguments()["history"][:120] == HISTORY[:120]  # a blob gone would raise here
            assert got.run.value()["answer"].endswith("turns read")
        assert survivors >= 5 and sweeps == 6
        assert _on_disk(blobs) == await app.store.blob_references()  # no orphan left, none missing
    finally:
        await app.close()


async def test_a_crash_on_either_side_of_a_blob_leaves_only_an_orphan_a_later_sweep_collects(
        store_url: str, fleet: WorkerFleet, tmp_path: Path):
    """A worker killed after its step's result went to the blob store and before the journal
    names it leaves an orphan: a sweep keeps it while younger than the grace, the run is
    taken over and ends whole, a sweep past the grace deletes the orphan alone. A sweep killed
    after it reclaimed the run and before it collected leaves the run's blobs: the next
    sweep deletes them."""
    blobs = tmp_path / "blobs"
    env = _env(blobs)
    young = {**env, "RUNWRIGHT_PAYLOAD_BLOB_GRACE_S": "3600"}
    app = rw.App(store_url, codecs=rw.Codecs.from_env(env))
    app.tasks.update(codec_apps.app.tasks)
    await app.open()
    try:
        handle = await app.submit("big_step", history=HISTORY)
        crashing = fleet.start(concurrency=1, app_spec=APP_SPEC, lease_s=2,
                               env={**env, "RUNWRIGHT_CRASH_POINTS": "step.after_side_effect:tool=kill"})
        assert await crashing.wait_exit() != 0
        [orphan] = _on_disk(blobs) - await app.store.blob_references()  # the step's result, named by no row
        report = await _sweep(store_url, young, "3600")
        assert report["blobs"] == 0 and orphan in _on_disk(blobs)  # young: its row may be on its way
        taker = fleet.start(concurrency=1, app_spec=APP_SPEC, env=env)
        assert await handle.result(timeout_s=90) == {"turns": 200}
        # Stopped: its own retention passes would collect what the sweeps below are to.
        assert await taker.stop() == 0
        [step] = await app.store.step_list(handle.id)
        assert _blob_of(step.result) != orphan and step.value()["output"] == HISTORY
        if orphan in _on_disk(blobs):  # else the worker's first pass collected it already
            await _past_the_grace(blobs, {orphan}, GRACE_S)
            report = await _sweep(store_url, env, "3600")
            assert report["blobs"] == 1
        assert orphan not in _on_disk(blobs)
        assert _on_disk(blobs) == await app.store.blob_references()
        # The sweep dies between the rows' delete and the blobs' collection.
        named = set(_on_disk(blobs))
        code, said = await asyncio.to_thread(_cli, store_url, {
            **env, "RUNWRIGHT_CRASH_POINTS": "sweep.before_collect=kill"}, "sweep", "--max-age-s", "0.001")
        assert code != 0, said
        with pytest.raises(rw.RunNotFound):
            await app.get(handle.id)
        assert _on_disk(blobs) == named  # orphans now: no row names them
        await _past_the_grace(blobs, named, GRACE_S)
        report = await _sweep(store_url, env, "3600")
        assert report["blobs"] == len(named) and _on_disk(blobs) == set()
    finally:
        await app.close()


async def _sweep(store_url: str, env: dict[str, str], max_age_s: str) -> dict[str, object]:
    code, said = await asyncio.to_thread(_cli, store_url, env, "sweep", "--max-age-s", max_age_s, "--json")
    assert code == 0, said
    return json.loads(said)
