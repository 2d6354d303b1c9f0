"""Payload codecs across a deployment's processes, on every real backend: a run submitted
here with codecs on is run by a worker process that has the keys from its environment
(including a newer key it encrypts with: rotation), its result decodes here, a CLI
process shows payloads sealed (naming the key id) unless --decode, which needs the keys and
is logged, and the HTTP API and its SSE stream (a server process with the keys) answer
plain JSON."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import uuid
from typing import Any

import httpx
import pytest

import runwright as rw
from runwright.store._params import EventListParams

from . import codec_apps
from .harness import ROOT, WorkerFleet, outputs, start_server

pytestmark = pytest.mark.process

APP_SPEC = "tests.process.codec_apps:app"
HISTORY = [{"role": "assistant" if i % 2 else "user", "content": f"turn {i}: " + "tool output lorem " * 30}
           for i in range(30)]
OPERATOR = "codecs-operator"


class Keys:
    """An old key and a new one, with ids of this test's own (the keyring is the process's)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.old_id, self.new_id = f"old-{tag}", f"new-{tag}"
        self.old, self.new = os.urandom(32), os.urandom(32)

    def env(self, *, encrypt_with: str) -> dict[str, str]:
        """What a process of the rotated deployment has: both keys, encrypting with one."""
        listed = ",".join(f"{key_id}={base64.b64encode(key).decode()}"
                          for key_id, key in ((self.new_id, self.new), (self.old_id, self.old)))
        return {"RUNWRIGHT_PAYLOAD_KEYS": listed, "RUNWRIGHT_PAYLOAD_ENCRYPT_WITH": encrypt_with,
                "RUNWRIGHT_PAYLOAD_COMPRESS_OVER": "1024"}


@pytest.fixture
def keys() -> Keys:
    return Keys()


async def _client(store_url: str, keys: Keys) -> rw.App:
    """This process: it knows both keys and still encrypts under the old one."""
    codecs = rw.Codecs(compress_over=1024, keys={keys.old_id: keys.old, keys.new_id: keys.new},
                       encrypt_with=keys.old_id)
    app = rw.App(store_url, codecs=codecs)
    app.tasks.update(codec_apps.app.tasks)  # to submit by name: it runs none of them
    await app.open()
    return app


def _sealed(text: str | None, key_id: str, chain: str = "za") -> bool:
    """Stored as an envelope (`chain`: z zstd, a AES-GCM) under `key_id`, no plain text in it."""
    return text is not None and text.startswith(f'{{"~rw1":"{chain}.{key_id}.') and "lorem" not in text


async def test_a_process_without_the_key_meets_one_clear_error(store_url: str, fleet: WorkerFleet,
                                                               keys: Keys):
    app = await _client(store_url, keys)
    try:
        handle = await app.submit("agent_turns", history=HISTORY)
    finally:
        await app.close()
    # A worker without it: the run ends with that error, not garbage handed to the task.
    fleet.start(concurrency=2, app_spec=APP_SPEC)
    # The CLI without any key shows the payloads sealed, naming the key id; asked to decode
    # them, it refuses in one line (exit 2, no traceback).
    code, said = await asyncio.to_thread(_cli, store_url, "show", str(handle.id), "--json")
    assert code == 0 and "lorem" not in said, said
    args = json.loads(said)["run"]["args"]
    # Its size: compressed, then sealed.
    assert args["~sealed"]["key"] == keys.old_id and 100 < args["~sealed"]["bytes"] < 1000
    code, said = await asyncio.to_thread(_cli, store_url, "show", str(handle.id), "--json", "--decode")
    assert code == 2 and "--decode needs the payload keys" in said and "Traceback" not in said, said
    assert len(said.strip().splitlines()) == 1, said
    async with rw.App(store_url, auto_migrate=False) as reader:
        with pytest.raises(rw.RunFailed) as ended:
            await (await reader.get(handle.id)).result(timeout_s=60)
    assert ended.value.error.get("type") == "PayloadUnreadable"
    assert keys.old_id in ended.value.error.get("message", "")


async def test_a_worker_process_with_the_keys_runs_it_and_every_face_reads_it_plain(
        store_url: str, fleet: WorkerFleet, keys: Keys):
    """Runs written here under the old key and through HTTP under the new one, run by a worker
    process that encrypts under the new one: every row sealed, every face plain JSON."""
    rotated = keys.env(encrypt_with=keys.new_id)
    app = await _client(store_url, keys)
    server = start_server(store_url, fleet.logs, APP_SPEC, {**rotated, "RUNWRIGHT_OPERATOR_TOKENS": OPERATOR})
    try:
        handle = await app.submit("agent_turns", history=HISTORY)
        fleet.start(concurrency=2, app_spec=APP_SPEC, env=rotated)
        result = await handle.result(timeout_s=60)
        assert result["history"] == [*HISTORY, {"role": "assistant", "content": "30 turns read"}]
        await _check_stored(app, handle.id, keys, result)
        seen = {e.kind: e.data async for e in app.events(handle.id)}
        assert seen["progress"] == {"turns": 30, "last": HISTORY[-1]["content"]}
        async with httpx.AsyncClient(base_url=await server.wait_listening(), timeout=60,
                                     headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
            await _check_http(http, app, keys)
    finally:
        server.kill()
        await app.close()


async def _check_stored(app: rw.App, run_id: int, keys: Keys, result: dict[str, Any]) -> None:
    """Arguments sealed here under the old key, the result and journal by the worker under
    the new one (rotation), the emitted event too; runwright's own events plain."""
    raw = await app.store.run_get(run_id)
    assert raw is not None
    assert _sealed(raw.args, keys.old_id) and _sealed(raw.result, keys.new_id)
    assert len(raw.result or "") < len(json.dumps(result)) / 3  # compressed before encrypted
    [step] = await app.store.step_list(run_id)
    assert _sealed(step.result, keys.new_id, "a") and step.value()["content"] == "30 turns read"
    stored = {e.kind: e.data for e in await app.store.event_list(EventListParams(run_id, 0, 100))}
    assert list(stored["progress"]) == ["~rw1"] and stored["submitted"]["task"] == "agent_turns"


async def _check_http(http: httpx.AsyncClient, app: rw.App, keys: Keys) -> None:
    """A run submitted through HTTP (sealed by the server), followed by SSE, read back."""
    made = await http.post("/runs", json={"task": "agent_turns", "args": {"history": HISTORY}})
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    assert made.json()["args"] == {"history": HISTORY}
    stream = await _stream(http, run_id)
    assert [item["kind"] for item in stream][-1] == "succeeded"
    progress = next(item for item in stream if item["kind"] == "progress")
    assert progress["data"] == {"turns": 30, "last": HISTORY[-1]["content"]}
    got = (await http.get(f"/runs/{run_id}")).json()
    assert got["args"] == {"history": HISTORY} and got["result"]["answer"] == "30 turns read"
    page = (await http.get(f"/runs/{run_id}/events")).json()["items"]
    assert {"turns": 30, "last": HISTORY[-1]["content"]} in [item["data"] for item in page]
    steps = (await http.get(f"/runs/{run_id}/steps")).json()
    assert steps[0]["result"] == {"role": "assistant", "content": "30 turns read"}
    raw = await app.store.run_get(run_id)
    assert raw is not None and _sealed(raw.args, keys.new_id)


async def _stream(http: httpx.AsyncClient, run_id: int) -> list[dict[str, Any]]:
    """The run's SSE stream to its end: each event's JSON."""
    items: list[dict[str, Any]] = []
    async with http.stream("GET", f"/runs/{run_id}/events/stream") as answer:
        async for line in answer.aiter_lines():
            if line.startswith("data:"):
                items.append(json.loads(line.removeprefix("data:").strip()))
    return items


async def test_the_cli_shows_payloads_sealed_unless_decode_which_it_logs(store_url: str, keys: Keys):
    """A CLI process with the keys: sealed by default all the same (it reads every
    tenant's rows); --decode shows them plain and logs who read which run."""
    app = await _client(store_url, keys)
    try:
        handle = await app.submit("agent_turns", history=HISTORY, delay_s=3600)
    finally:
        await app.close()
    env = keys.env(encrypt_with=keys.new_id)
    code, said = await asyncio.to_thread(_cli, store_url, "show", str(handle.id), "--json", env=env)
    assert code == 0 and "lorem" not in said and "payload decode" not in said, said
    assert json.loads(said)["run"]["args"]["~sealed"]["key"] == keys.old_id
    code, said = await asyncio.to_thread(_cli, store_url, "runs", "--json", env=env)
    assert code == 0 and "lorem" not in said and keys.old_id in said, said
    code, out, err = await asyncio.to_thread(_cli_split, store_url, "show", str(handle.id), "--json",
                                             "--decode", env=env)
    assert code == 0 and json.loads(out)["run"]["args"] == {"history": HISTORY}, err
    [audit] = [line for line in err.splitlines() if "payload decode" in line]
    assert f"run {handle.id}" in audit and "with the CLI at 20" in audit, err


def _cli(store_url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    code, out, err = _cli_split(store_url, *args, env=env)
    return code, out + err


def _cli_split(store_url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`runwright ARGS --url store_url` with no payload settings but `env`'s: its exit
    code, stdout and stderr."""
    import subprocess

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RUNWRIGHT_PAYLOAD_")}, **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "runwright", *args, "--url", store_url], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = outputs(proc, 120)
    return proc.returncode, out, err
