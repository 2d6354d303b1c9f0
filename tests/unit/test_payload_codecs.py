"""Payload codecs (core._payloads): what is sealed, what opens, and the one clear error
of a key this process lacks. No store: the stores' side is tests/conformance and
tests/process (test_payload_codecs)."""

from __future__ import annotations

import base64
import json
import os
import uuid

import pytest

import runwright as rw
from runwright.core._payloads import Codecs, install_keys, is_envelope, load, opened_data
from runwright.tasks._limits import Limits

HISTORY = {"messages": [{"role": "user", "content": f"turn {i}: " + "the quick brown fox " * 8}
                        for i in range(60)]}


def _key_id() -> str:  # the keyring is the process's: each test its own ids
    return f"k-{uuid.uuid4().hex[:10]}"


def _codecs(**options: object) -> tuple[Codecs, str]:
    key_id = _key_id()
    codecs = Codecs(keys={key_id: os.urandom(32)}, encrypt_with=key_id, **options)  # type: ignore[arg-type]
    install_keys(codecs)
    return codecs, key_id


def test_without_codecs_a_payload_is_the_json_it_always_was():
    assert Limits().payload(HISTORY, "x") == json.dumps(HISTORY, separators=(",", ":"), ensure_ascii=False)


def test_compression_alone_shrinks_large_payloads_and_leaves_small_ones_plain():
    codecs = Codecs(compress_over=1024)
    small = Limits(codecs=codecs).payload({"n": 1}, "x")
    assert small == '{"n":1}'
    big = Limits(codecs=codecs).payload(HISTORY, "x")
    assert big.startswith('{"~rw1":"z..') and len(big) < len(json.dumps(HISTORY)) / 3
    assert load(big) == HISTORY and json.loads(big)  # still a JSON object for readers in the store


def test_encryption_seals_every_payload_and_opens_with_the_key():
    codecs, key_id = _codecs(compress_over=None)
    text = Limits(codecs=codecs).payload({"secret": "hunter2"}, "x")
    assert text.startswith(f'{{"~rw1":"a.{key_id}.') and "hunter2" not in text
    assert load(text) == {"secret": "hunter2"}
    assert Limits(codecs=codecs).payload(None, "x") == "null"  # nothing to hide


def test_rotation_new_writes_use_the_newest_key_old_ones_still_open():
    old, old_id = _codecs()
    sealed_old = old.seal(json.dumps(HISTORY))
    new_id = _key_id()
    new = Codecs(keys={new_id: os.urandom(32), old_id: old.key_bytes[old_id]}, encrypt_with=new_id)
    install_keys(new)
    sealed_new = new.seal(json.dumps(HISTORY))
    assert sealed_old.startswith(f'{{"~rw1":"za.{old_id}.')
    assert sealed_new.startswith(f'{{"~rw1":"za.{new_id}.')
    assert load(sealed_old) == load(sealed_new) == HISTORY


def test_a_key_this_process_lacks_is_one_error_naming_it():
    key_id = _key_id()
    text = Codecs(keys={key_id: os.urandom(32)}, encrypt_with=key_id).seal('{"a":1}')  # never installed
    with pytest.raises(rw.PayloadUnreadable, match=key_id) as caught:
        load(text)
    assert caught.value.key_id == key_id and isinstance(caught.value, rw.ConfigError)


def test_an_altered_payload_is_refused_not_read_as_garbage():
    codecs, key_id = _codecs()
    text = codecs.seal('{"amount":100}')
    body = text[len('{"~rw1":"'):-2].split(".")[2]
    raw = bytearray(base64.b64decode(body))
    raw[-1] ^= 1
    altered = text.replace(body, base64.b64encode(bytes(raw)).decode())
    with pytest.raises(rw.PayloadUnreadable, match="does not open"):
        load(altered)
    # the header is bound too: the same bytes under another chain do not open
    with pytest.raises(rw.PayloadUnreadable):
        load(text.replace('"a.', '"za.', 1))


def test_a_plain_value_that_looks_like_an_envelope_is_wrapped_and_comes_back():
    looks = json.dumps({"~rw1": "z..AAAA"}, separators=(",", ":"))
    sealed = Codecs(compress_over=None).seal(looks)
    assert sealed != looks and is_envelope(sealed) and load(sealed) == {"~rw1": "z..AAAA"}
    assert load('{"~rw1":"not an envelope"}') == {"~rw1": "not an envelope"}


def test_event_data_parsed_by_a_store_opens():
    codecs, _ = _codecs()
    data = json.loads(codecs.seal('{"pct":50}'))
    assert opened_data(data) == {"pct": 50}
    assert opened_data({"pct": 50}) == {"pct": 50}


def test_from_env_reads_keys_newest_first_and_is_none_when_unset():
    assert Codecs.from_env({}) is None
    k2, k1 = base64.b64encode(os.urandom(32)).decode(), base64.urlsafe_b64encode(os.urandom(16)).decode()
    codecs = Codecs.from_env({"RUNWRIGHT_PAYLOAD_KEYS": f"k2={k2}, k1={k1}",
                              "RUNWRIGHT_PAYLOAD_COMPRESS_OVER": "2048"})
    assert codecs is not None and codecs.encrypt_with == "k2" and codecs.compress_over == 2048
    assert sorted(codecs.key_bytes) == ["k1", "k2"] and len(codecs.key_bytes["k1"]) == 16
    assert "k2=" not in repr(codecs) and k2 not in repr(codecs)  # ids shown, keys never


@pytest.mark.parametrize(("options", "words"), [
    ({"keys": {"k1": b"short"}}, "16, 24 or 32 bytes"),
    ({"keys": {"k 1": os.urandom(32)}}, "a key id is"),
    ({"keys": {"k1": "***"}}, "not base64"),
    ({"encrypt_with": "k9"}, "encrypt_with names key 'k9'"),
    ({"compress_over": -1}, "compress_over"),
    ({"keys": ["k1"]}, "keys is a mapping"),
])
def test_a_bad_setting_is_one_config_error(options: dict[str, object], words: str):
    with pytest.raises(rw.ConfigError, match=words):
        Codecs(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("env", "words"), [
    ({"RUNWRIGHT_PAYLOAD_KEYS": "k1"}, "id=base64key"),
    ({"RUNWRIGHT_PAYLOAD_COMPRESS_OVER": "lots"}, "RUNWRIGHT_PAYLOAD_COMPRESS_OVER"),
])
def test_a_bad_variable_is_one_config_error(env: dict[str, str], words: str):
    with pytest.raises(rw.ConfigError, match=words):
        Codecs.from_env(env)


def test_one_key_id_names_one_key_in_a_process():
    key_id = _key_id()
    install_keys(Codecs(keys={key_id: os.urandom(32)}))
    with pytest.raises(rw.ConfigError, match="two different keys"):
        install_keys(Codecs(keys={key_id: os.urandom(32)}))
