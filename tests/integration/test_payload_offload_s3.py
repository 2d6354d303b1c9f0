"""Offloaded payloads on S3-compatible storage: a real S3 server (moto's, an HTTP server
speaking S3, started here on a free port) behind `Codecs(blobs="s3://bucket/prefix?endpoint=")`,
on every backend: a run's large payloads go to the bucket, its rows keep envelopes, every
reader gets the values, retention deletes the reclaimed run's objects and keeps the
survivor's, a missing object is one PayloadUnreadable naming it."""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from typing import Any, AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.core._blobs import S3Blobs, blob_store, new_name
from runwright.core._payloads import load
from runwright.engine._sweeper import Retention, Sweeper
from runwright.store._params import RunReclaimParams

from .conftest import running_worker

HISTORY = [{"role": "user", "content": f"turn {i}: " + os.urandom(32).hex()} for i in range(150)]
ENVELOPE = re.compile(r'^\{"~rw1":"zb\.\.([0-9a-f]{32})"\}$')


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    # moto's server checks no signature; boto3 still wants credentials to sign with.
    given = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update({name: "runwright-test" for name in given})
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for name, value in given.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    bucket = f"rw-{uuid.uuid4().hex[:12]}"
    S3Blobs(bucket, "", s3_endpoint, "us-east-1").client().create_bucket(Bucket=bucket)
    return f"s3://{bucket}/deploy/blobs?endpoint={s3_endpoint}&region=us-east-1"


@contextlib.asynccontextmanager
async def _app(url: str, codecs: rw.Codecs) -> AsyncIterator[rw.App]:
    app = rw.App(url, codecs=codecs)

    @app.task(retries=0)
    async def echo(ctx: rw.Context, history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"history": await ctx.step("keep", lambda: history)}

    await app.open()
    try:
        yield app
    finally:
        await app.close()


def _blob_of(text: str | None) -> str:
    found = ENVELOPE.match(text or "")
    assert found is not None, f"not an offloaded envelope: {(text or '')[:80]!r}"
    return found.group(1)


async def _run(app: rw.App) -> tuple[int, set[str]]:
    handle = await app.submit("echo", history=HISTORY)
    assert (await handle.result(timeout_s=30)) == {"history": HISTORY}
    raw = await app.store.run_get(handle.id)
    assert raw is not None
    [step] = await app.store.step_list(handle.id)
    return handle.id, {_blob_of(raw.args), _blob_of(raw.result), _blob_of(step.result)}


def _objects(s3_url: str) -> set[str]:
    return {name for name, _ in blob_store(s3_url).listing()}


async def test_payloads_offloaded_to_s3_read_back_and_retention_deletes_them(store_url: str, s3_url: str):
    codecs = rw.Codecs(compress_over=1024, offload_over=4096, blobs=s3_url, blob_grace_s=0)
    async with _app(store_url, codecs) as app, running_worker(app, poll_s=0.05):
        gone_id, gone = await _run(app)
        kept_id, kept = await _run(app)
        assert gone | kept == _objects(s3_url)  # under the prefix, one object a payload
        assert (await app.get(kept_id)).run.arguments() == {"history": HISTORY}
        reclaimed = await app.store.run_reclaim(RunReclaimParams(ended_before=time.time() + 3600,
                                                                 run_ids=[gone_id]))
        assert reclaimed.run_ids == [gone_id]
        sweeper = Sweeper(app.store, app.runtime.clock, Retention(max_age_s=3600), holder="t", lease_s=60,
                          codecs=codecs)
        assert (await sweeper.sweep()).blobs == 3
        assert _objects(s3_url) == kept
        assert (await app.get(kept_id)).run.value() == {"history": HISTORY}
        raw = await app.store.run_get(kept_id)
        assert raw is not None
        lost = _blob_of(raw.result)
        blob_store(s3_url).delete([lost])
        with pytest.raises(rw.PayloadUnreadable, match=lost):
            load(raw.result or "")


def test_the_s3_store_puts_gets_lists_and_deletes(s3_url: str):
    blobs = blob_store(s3_url)
    names = [new_name() for _ in range(3)]
    for name in names:
        blobs.put(name, name.encode())
    assert [blobs.get(name) for name in names] == [name.encode() for name in names]
    assert {name for name, _ in blobs.listing()} == set(names)
    assert all(abs(written - time.time()) < 600 for _, written in blobs.listing())
    blobs.delete(names[:2] + [new_name()])  # a name already gone is no error
    assert {name for name, _ in blobs.listing()} == {names[2]}
    with pytest.raises(rw.PayloadUnreadable, match=names[0]) as caught:
        blobs.get(names[0])
    assert caught.value.blob == names[0]


def test_an_s3_failure_is_a_store_error_naming_the_store(s3_endpoint: str):
    """Not boto3's own exception: a StoreError, which a worker's retention pass logs and
    retries as it does its database failing (an unknown exception would stop the worker)."""
    blobs = blob_store(f"s3://rw-no-such-bucket-{uuid.uuid4().hex[:8]}/p?endpoint={s3_endpoint}&region=us-east-1")
    for call in (lambda: blobs.put(new_name(), b"x"), lambda: list(blobs.listing()),
                 lambda: blobs.delete([new_name()])):
        with pytest.raises(rw.StoreError, match="rw-no-such-bucket"):
            call()
