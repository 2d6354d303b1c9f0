"""Payload offloading (core._payloads with core._blobs, a real directory): what goes to
the blob store, what the row keeps, what opens, the settings refused, the names retention's
collection finds. The stores' side: tests/conformance/test_payload_offload.py; processes:
tests/process/test_payload_offload.py; S3: tests/integration/test_payload_offload_s3.py."""

from __future__ import annotations

import base64
import json
import os
import re
import uuid
from pathlib import Path

import pytest

import runwright as rw
from runwright.core._blobs import FileBlobs, S3Blobs, blob_store
from runwright.core._payloads import Codecs, blob_names, install_keys, load
from runwright.tasks._limits import Limits

BIG = {"messages": [{"role": "user", "content": f"turn {i}: " + os.urandom(40).hex()} for i in range(100)]}
ENVELOPE = re.compile(r'^\{"~rw1":"([za]*)b\.([\w-]*)\.([0-9a-f]{32})"\}$')


def _stored(codecs: Codecs, value: object) -> str:
    install_keys(codecs)
    return Limits(codecs=codecs).payload(value, "x")


def _files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.mark.parametrize("chain", ["", "z", "a", "za"])
def test_a_payload_over_the_size_goes_to_the_blob_store_and_opens(tmp_path: Path, chain: str):
    key_id = f"u-{uuid.uuid4().hex[:8]}"
    codecs = Codecs(compress_over=256 if "z" in chain else None, keys={key_id: os.urandom(32)},
                    encrypt_with=key_id if "a" in chain else None, offload_over=1024, blobs=f"file://{tmp_path}")
    text = _stored(codecs, BIG)
    found = ENVELOPE.match(text)
    assert found is not None and found.group(1) == chain and len(text) < 100
    assert found.group(2) == (key_id if "a" in chain else "")
    [path] = _files(tmp_path)
    assert path.name == found.group(3) and path.parent.name == path.name[:2]
    assert (b"turn 1" in path.read_bytes()) == (chain == "")  # compressed or encrypted before offloading
    assert load(text) == BIG


def test_a_payload_under_the_size_stays_in_the_row(tmp_path: Path):
    codecs = Codecs(compress_over=None, offload_over=1 << 20, blobs=f"file://{tmp_path}")
    assert _stored(codecs, {"n": 1}) == '{"n":1}' and _stored(codecs, BIG) == json.dumps(
        BIG, separators=(",", ":"))
    assert _files(tmp_path) == []


def test_the_size_is_judged_after_compression(tmp_path: Path):
    repetitive = {"text": "the quick brown fox " * 500}  # 10 KB of JSON, ~100 bytes compressed
    codecs = Codecs(compress_over=256, offload_over=4096, blobs=f"file://{tmp_path}")
    text = _stored(codecs, repetitive)
    assert text.startswith('{"~rw1":"z.') and _files(tmp_path) == [] and load(text) == repetitive


def test_each_payload_gets_a_blob_of_its_own(tmp_path: Path):
    codecs = Codecs(compress_over=None, offload_over=16, blobs=f"file://{tmp_path}")
    first, second = _stored(codecs, BIG), _stored(codecs, BIG)
    assert first != second and len(_files(tmp_path)) == 2  # same content, two names (see core._blobs)


def test_a_missing_blob_is_payload_unreadable_naming_it(tmp_path: Path):
    codecs = Codecs(compress_over=None, offload_over=16, blobs=f"file://{tmp_path}")
    text = _stored(codecs, BIG)
    [path] = _files(tmp_path)
    path.unlink()
    with pytest.raises(rw.PayloadUnreadable, match=path.name) as caught:
        load(text)
    assert caught.value.blob == path.name and "RUNWRIGHT_PAYLOAD_BLOBS" in str(caught.value)


def test_a_tampered_blob_does_not_open(tmp_path: Path):
    key_id = f"u-{uuid.uuid4().hex[:8]}"
    codecs = Codecs(keys={key_id: os.urandom(32)}, encrypt_with=key_id, offload_over=16, blobs=f"file://{tmp_path}")
    text = _stored(codecs, BIG)
    [path] = _files(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(rw.PayloadUnreadable, match=key_id):
        load(text)


def test_the_settings_are_checked_when_made():
    with pytest.raises(rw.ConfigError, match="needs a blob store"):
        Codecs(offload_over=1024)
    with pytest.raises(rw.ConfigError, match="offload_over"):
        Codecs(offload_over=0, blobs="file:///tmp/x")
    with pytest.raises(rw.ConfigError, match="file:///absolute/path"):
        Codecs(blobs="file://relative/path")
    with pytest.raises(rw.ConfigError, match="no bucket"):
        Codecs(blobs="s3:///prefix")
    with pytest.raises(rw.ConfigError, match="endpoint= and"):
        Codecs(blobs="s3://bucket/p?secret=x")
    with pytest.raises(rw.ConfigError, match="file:///path or s3://"):
        Codecs(blobs="ftp://host/x")
    with pytest.raises(rw.ConfigError, match="blob_grace_s"):
        Codecs(blobs="file:///tmp/x", blob_grace_s=-1)


def test_the_environment_configures_offloading(tmp_path: Path):
    key = base64.b64encode(os.urandom(32)).decode()
    env = {"RUNWRIGHT_PAYLOAD_KEYS": f"e-{uuid.uuid4().hex[:8]}={key}", "RUNWRIGHT_PAYLOAD_BLOBS": f"file://{tmp_path}",
           "RUNWRIGHT_PAYLOAD_OFFLOAD_OVER": "2048", "RUNWRIGHT_PAYLOAD_BLOB_GRACE_S": "60"}
    codecs = Codecs.from_env(env)
    assert codecs is not None and (codecs.offload_over, codecs.blobs, codecs.blob_grace_s) == (
        2048, f"file://{tmp_path}", 60.0)
    reader = Codecs.from_env({"RUNWRIGHT_PAYLOAD_BLOBS": f"file://{tmp_path}"})  # reads, offloads nothing
    assert reader is not None and reader.changes_nothing and reader.blob_grace_s == 3600.0
    with pytest.raises(rw.ConfigError, match="RUNWRIGHT_PAYLOAD_OFFLOAD_OVER"):
        Codecs.from_env({**env, "RUNWRIGHT_PAYLOAD_OFFLOAD_OVER": "big"})


def test_the_repr_names_no_secret_of_an_s3_url():
    codecs = Codecs(compress_over=None, blobs="s3://bucket/p?endpoint=http://user:pw@h:9000")
    assert "pw" not in repr(codecs) and "s3://bucket/p" in repr(codecs)


def test_the_stores_the_urls_name():
    files = blob_store("file:///var/lib/app/blobs")
    assert isinstance(files, FileBlobs) and str(files.root) == "/var/lib/app/blobs"
    s3 = blob_store("s3://bucket/a/b/?endpoint=http://127.0.0.1:9000&region=eu-west-1")
    assert isinstance(s3, S3Blobs) and (s3.bucket, s3.prefix) == ("bucket", "a/b")


def test_blob_names_are_found_however_a_store_prints_the_envelope():
    name = "0123456789abcdef0123456789abcdef"
    assert blob_names(f'{{"~rw1":"zab.k1.{name}"}}') == {name}
    assert blob_names(f'{{"~rw1": "b..{name}"}}') == {name}  # PostgreSQL's jsonb as text
    escaped = json.dumps({"data": json.dumps({"~rw1": f"zb..{name}"})})  # an envelope in a JSON string
    assert blob_names(escaped) == {name}
    assert blob_names(f'{{"~rw1":"za.k1.{name}"}}') == set()  # inline: no blob
    assert blob_names('{"plain": 1}') == set()


async def test_the_engine_seals_a_payload_that_may_be_offloaded_off_the_event_loop(tmp_path: Path):
    import threading

    codecs = Codecs(compress_over=None, offload_over=1024, blobs=f"file://{tmp_path}")
    install_keys(codecs)
    writers: list[int] = []
    store = blob_store(f"file://{tmp_path}")
    put = type(store).put

    def spying(self: FileBlobs, name: str, data: bytes) -> None:
        writers.append(threading.get_ident())
        put(self, name, data)

    original, FileBlobs.put = FileBlobs.put, spying  # type: ignore[method-assign]
    try:
        text = await Limits(codecs=codecs).stored(BIG, "x")
        small = await Limits(codecs=codecs).stored({"n": 1}, "x")
    finally:
        FileBlobs.put = original  # type: ignore[method-assign]
    assert load(text) == BIG and small == '{"n":1}'
    assert writers and threading.get_ident() not in writers  # written in a thread, the loop free
    assert not codecs.may_offload('{"n":1}') and codecs.may_offload(json.dumps(BIG))
