"""Payload codecs: compression (zstd) and encryption (AES-GCM, with key ids and rotation)
of the payloads a run carries, kept as text in every store.

Opt-in. With no codec configured a payload is the JSON text it always was, byte for
byte. With codecs, a payload the codecs change is stored as an *envelope*: still a JSON
object (so every reader in the database that parses payload JSON — SQL JSON functions,
Lua's cjson, a store's own `json.loads` of event data — still reads valid JSON), with one
field naming the chain, the key id and the bytes:

    {"~rw1":"<chain>.<key id>.<base64>"}

`<chain>` is the steps applied in order: `z` zstd, `a` AES-256/192/128-GCM (a 12-byte
random nonce before the ciphertext; the header `<chain>.<key id>` is the associated
data, so neither can be swapped on a stored payload), then `b` offloaded: the bytes are
in the process's blob store (core._blobs) and the envelope holds the blob's name where
the base64 would be (the AES header stays the chain without its `b`). An empty chain
wraps a plain value that would otherwise read as an envelope. Plain rows and envelopes coexist: `load` reads
either, so turning codecs on (or a key rotation) needs no migration.

Sealing uses the App's `Codecs` (passed down with the limits); opening needs only a key
by its id, so it reads the process's keyring: every key any `Codecs` of this process was
given (an App, or RUNWRIGHT_PAYLOAD_KEYS). Rotation: add the new key, point
`encrypt_with` at it; payloads sealed under the old one still open while the old key is
listed. A key id this process lacks is one PayloadUnreadable naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from ..errors import ConfigError, PayloadUnreadable
from ._blobs import BLOB_NAME, blob_store, install_blobs, new_name, read_blob

__all__ = ["BLOB_REFERENCE", "DEFAULT_BLOB_GRACE_S", "ENVELOPE_FIELD", "SEALED_FIELD", "Codecs", "blob_names",
           "holds_keys", "install_keys", "is_envelope", "load", "opened_data", "sealed_view", "sealing"]

ENVELOPE_FIELD = "~rw1"
_PREFIX = '{"' + ENVELOPE_FIELD + '":"'
_ENVELOPE = re.compile(r'^\{"~rw1":"([za]*b?)\.([A-Za-z0-9_-]{0,64})\.([A-Za-z0-9+/=]*)"\}$')
# Blob names in any text a store keeps: an envelope, event data as PostgreSQL's jsonb
# prints it (a space after the colon), or an envelope inside a JSON string (Redis keeps
# an event as JSON text, its data's quotes escaped). What retention's collection keeps.
BLOB_REFERENCE = re.compile(r'~rw1\\*"\s*:\s*\\*"[za]*b\.[A-Za-z0-9_-]{0,64}\.([0-9a-f]{32})\b')
DEFAULT_BLOB_GRACE_S = 3600.0
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NONCE_BYTES = 12
_ZSTD_LEVEL = 3  # zstd's default: most of the ratio at a small cost per payload

# Every key this process was given, by id: what `load` opens envelopes with.
_KEYRING: dict[str, bytes] = {}
# A zstd context is reusable but not thread-safe (sync tasks encode in threads): one per
# thread. Made anew per payload, a context cost more than compressing 2 KB with it.
_CONTEXTS = threading.local()
# The operator's view (server._decode, the CLI without --decode): `load` and `opened_data`
# answer an encrypted payload with a placeholder naming its key id and size instead of
# opening it. Set only around reads shown to the operator, never around what a write
# computes from a payload (a merge of arguments, a worker's call), which must open it.
_SEALED_VIEW: ContextVar[bool] = ContextVar("runwright_sealed_view", default=False)
SEALED_FIELD = "~sealed"


@dataclass(frozen=True, eq=False)
class Codecs:
    """How a deployment stores payloads (arguments, results, step results, event data).

    `compress_over`: payloads of at least this many bytes of JSON are compressed (zstd),
    when that makes them smaller; None compresses nothing. Defaults to 1024.
    `keys`: key id -> AES key (16, 24 or 32 bytes, or their base64). Every key that sealed
    a payload still stored must stay listed for it to be read. Defaults to none.
    `encrypt_with`: the key id new payloads are encrypted under (the newest key); None
    encrypts nothing. Defaults to None.
    `offload_over`: payloads whose stored bytes (after compression and encryption) are at
    least this many are written to the blob store `blobs`, the row keeping a small
    envelope naming the blob; None offloads nothing. Defaults to None.
    `blobs`: the blob store, `file:///path` or `s3://bucket/prefix?endpoint=URL&region=NAME`
    (core._blobs): where offloaded payloads go and are read from. A process that reads
    offloaded payloads needs it too. Defaults to None.
    `blob_grace_s`: retention deletes a blob no row names only once it is this old (the
    longest a payload may be sealed before its row is committed). Defaults to 3600.
    """

    compress_over: int | None = 1024
    keys: Mapping[str, bytes | str] = field(default_factory=dict)
    encrypt_with: str | None = None
    offload_over: int | None = None
    blobs: str | None = None
    blob_grace_s: float = DEFAULT_BLOB_GRACE_S
    # The keys as bytes, checked (what seals and what the keyring holds).
    key_bytes: dict[str, bytes] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.compress_over is not None and (
                isinstance(self.compress_over, bool) or not isinstance(self.compress_over, int)
                or self.compress_over < 0):
            raise ConfigError(f"codecs: compress_over is a number of bytes >= 0 or None, "
                              f"got {self.compress_over!r}")
        if not isinstance(self.keys, Mapping):
            raise ConfigError(f"codecs: keys is a mapping of key id -> key, got {type(self.keys).__name__}")
        object.__setattr__(self, "key_bytes", {_key_id(k): _key_bytes(k, v) for k, v in self.keys.items()})
        if self.encrypt_with is not None and self.encrypt_with not in self.key_bytes:
            raise ConfigError(f"codecs: encrypt_with names key {self.encrypt_with!r}, which is not "
                              f"among the keys given ({', '.join(sorted(self.keys)) or 'none'})")
        if self.offload_over is not None and (
                isinstance(self.offload_over, bool) or not isinstance(self.offload_over, int)
                or self.offload_over < 1):
            raise ConfigError(f"codecs: offload_over is a number of bytes >= 1 or None, "
                              f"got {self.offload_over!r}")
        if self.offload_over is not None and self.blobs is None:
            raise ConfigError("codecs: offload_over needs a blob store: blobs='file:///path' or "
                              "'s3://bucket/prefix' (RUNWRIGHT_PAYLOAD_BLOBS)")
        if isinstance(self.blob_grace_s, bool) or not isinstance(self.blob_grace_s, (int, float)) \
                or not self.blob_grace_s >= 0:
            raise ConfigError(f"codecs: blob_grace_s is a number of seconds >= 0, got {self.blob_grace_s!r}")
        if self.blobs is not None:
            blob_store(self.blobs)  # its URL checked now, not at the first large payload

    def __repr__(self) -> str:  # never the keys themselves
        offload = (f", offload_over={self.offload_over!r}, blobs={_safe_url(self.blobs)!r}"
                   if self.blobs is not None or self.offload_over is not None else "")
        return (f"Codecs(compress_over={self.compress_over!r}, keys=[{', '.join(sorted(self.keys))}], "
                f"encrypt_with={self.encrypt_with!r}{offload})")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Codecs | None:
        """Codecs from RUNWRIGHT_PAYLOAD_KEYS (`id=base64key,id=base64key`),
        RUNWRIGHT_PAYLOAD_ENCRYPT_WITH (a key id; defaults to the first key listed) and
        RUNWRIGHT_PAYLOAD_COMPRESS_OVER (bytes; unset compresses nothing),
        RUNWRIGHT_PAYLOAD_BLOBS (the blob store's URL), RUNWRIGHT_PAYLOAD_OFFLOAD_OVER (bytes;
        unset offloads nothing) and RUNWRIGHT_PAYLOAD_BLOB_GRACE_S. None when none of them is
        set: payloads stay plain."""
        env = os.environ if environ is None else environ
        keys_text = env.get("RUNWRIGHT_PAYLOAD_KEYS", "").strip()
        over_text = env.get("RUNWRIGHT_PAYLOAD_COMPRESS_OVER", "").strip()
        encrypt_with = env.get("RUNWRIGHT_PAYLOAD_ENCRYPT_WITH", "").strip() or None
        blobs = env.get("RUNWRIGHT_PAYLOAD_BLOBS", "").strip() or None
        offload_text = env.get("RUNWRIGHT_PAYLOAD_OFFLOAD_OVER", "").strip()
        grace_text = env.get("RUNWRIGHT_PAYLOAD_BLOB_GRACE_S", "").strip()
        if not (keys_text or over_text or encrypt_with or blobs or offload_text):
            return None
        keys: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in keys_text.split(","))):
            key_id, sep, key = item.partition("=")
            if not sep:
                raise ConfigError("RUNWRIGHT_PAYLOAD_KEYS is a list of id=base64key, comma-separated; "
                                  f"an item has no '=' (key id {key_id[:20]!r}...)")
            keys[key_id.strip()] = key.strip()
        try:
            over = int(over_text) if over_text else None
        except ValueError:
            raise ConfigError(f"RUNWRIGHT_PAYLOAD_COMPRESS_OVER is a number of bytes, "
                              f"got {over_text!r}") from None
        if encrypt_with is None and keys:
            encrypt_with = next(iter(keys))
        grace = _env_number("RUNWRIGHT_PAYLOAD_BLOB_GRACE_S", grace_text, float)
        return cls(compress_over=over, keys=keys, encrypt_with=encrypt_with, blobs=blobs,
                   offload_over=_env_number("RUNWRIGHT_PAYLOAD_OFFLOAD_OVER", offload_text, int),
                   blob_grace_s=DEFAULT_BLOB_GRACE_S if grace is None else grace)

    @property
    def changes_nothing(self) -> bool:
        return self.compress_over is None and self.encrypt_with is None and self.offload_over is None

    def may_offload(self, text: str) -> bool:
        """Whether sealing `text` may write a blob (cheap, without encoding it: a code point
        is at most 4 bytes, and the codecs add fewer than 64)."""
        return self.offload_over is not None and 4 * len(text) + 64 >= self.offload_over

    def seal(self, text: str) -> str:
        """The stored form of payload JSON `text`: itself when no codec applies, else an envelope."""
        if text == "null":  # nothing to hide or shrink (most tasks return nothing)
            return text
        data = text.encode()
        chain = ""
        if self.compress_over is not None and len(data) >= self.compress_over:
            packed = _compressor().compress(data)
            if len(packed) < len(data):
                data, chain = packed, "z"
        key_id = ""
        if self.encrypt_with is not None:
            key_id, chain = self.encrypt_with, chain + "a"
            data = _encrypt(self.key_bytes[key_id], f"{chain}.{key_id}".encode(), data)
        if self.offload_over is not None and self.blobs is not None and len(data) >= self.offload_over:
            # Written (durably) before the row is: a crash between leaves an orphan blob
            # that retention collects, never a row naming a blob that is not there.
            name = new_name()
            store = install_blobs(self.blobs)
            assert store is not None
            store.put(name, data)
            return f'{_PREFIX}{chain}b.{key_id}.{name}"}}'
        if not chain and not text.startswith(_PREFIX):
            return text
        return f'{_PREFIX}{chain}.{key_id}.{base64.b64encode(data).decode("ascii")}"}}'


def install_keys(codecs: Codecs | None) -> None:
    """Add `codecs`' keys to the keyring this process opens envelopes with. One id names
    one key: a second, different key under an id already held is refused. Its blob store
    is added to those offloaded payloads are read from."""
    if codecs is None:
        return
    install_blobs(codecs.blobs)
    for key_id, key in codecs.key_bytes.items():
        held = _KEYRING.setdefault(key_id, key)
        if held != key:
            raise ConfigError(f"payload key id {key_id!r} is given two different keys in this "
                              f"process; give each key its own id")


def holds_keys() -> bool:
    """Whether this process was given any payload key (what opening an encrypted payload needs)."""
    return bool(_KEYRING)


def sealing(on: bool) -> None:
    """Show encrypted payloads sealed (`on`) or opened, in this context and the tasks and
    threads it starts from now on (a CLI command's, an HTTP request's)."""
    _SEALED_VIEW.set(on)


@contextmanager
def sealed_view(on: bool) -> Iterator[None]:
    """`sealing(on)` for the block only (one run's payloads in a page of several tenants')."""
    token = _SEALED_VIEW.set(on)
    try:
        yield
    finally:
        _SEALED_VIEW.reset(token)


def is_envelope(text: str) -> bool:
    return text.startswith(_PREFIX) and _ENVELOPE.match(text) is not None


def load(text: str) -> Any:
    """The value of a stored payload: plain JSON, or an envelope opened."""
    if text.startswith(_PREFIX):
        if _SEALED_VIEW.get():
            shown = _placeholder(text)
            if shown is not None:
                return shown
        return json.loads(_open(text))
    return json.loads(text)


def opened_data(data: Any) -> Any:
    """Event data as a store parsed it, with an envelope opened (other data as it is)."""
    if type(data) is dict and len(data) == 1 and ENVELOPE_FIELD in data:
        inner = data[ENVELOPE_FIELD]
        if isinstance(inner, str):
            return load(_PREFIX + inner + '"}')
    return data


def _placeholder(text: str) -> dict[str, Any] | None:
    """What the operator's view shows of an encrypted payload: its key id and its sealed
    size (bytes stored: nonce, ciphertext and tag; an offloaded one says so instead), never
    a byte of its content. None for a payload not encrypted (compressed only: nothing to
    keep from anyone who reads the database), which is opened as usual."""
    found = _ENVELOPE.match(text)
    if found is None or "a" not in found.group(1):
        return None
    chain, key_id, body = found.groups()
    if chain.endswith("b"):
        return {SEALED_FIELD: {"key": key_id, "offloaded": True}}
    return {SEALED_FIELD: {"key": key_id, "bytes": len(body) * 3 // 4 - body.count("=")}}


def _open(text: str) -> str:
    found = _ENVELOPE.match(text)
    if found is None:  # a plain object that only starts like an envelope
        return text
    chain, key_id, body = found.groups()
    if chain.endswith("b"):
        if not BLOB_NAME.match(body):
            raise PayloadUnreadable(f"a stored payload's envelope ({chain}.{key_id}) does not name a blob")
        chain, data = chain[:-1], read_blob(body)
    else:
        try:
            data = binascii.a2b_base64(body)  # its alphabet checked by _ENVELOPE already
        except binascii.Error:
            raise PayloadUnreadable(f"a stored payload's envelope ({chain}.{key_id}) is not valid base64",
                                    key_id=key_id or None) from None
    for step in reversed(chain):
        data = _decrypt(key_id, f"{chain}.{key_id}".encode(), data) if step == "a" else _decompress(data)
    return data.decode()


def _encrypt(key: bytes, header: bytes, data: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(_NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, data, header)


def _decrypt(key_id: str, header: bytes, data: bytes) -> bytes:
    key = _KEYRING.get(key_id)
    if key is None:
        held = ", ".join(sorted(_KEYRING)) or "none"
        raise PayloadUnreadable(f"a stored payload is encrypted under key id {key_id!r}, which this "
                                f"process does not have (its keys: {held}); add it to the App's "
                                f"Codecs(keys=...) or RUNWRIGHT_PAYLOAD_KEYS", key_id=key_id)
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        return AESGCM(key).decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], header)
    except (InvalidTag, ValueError):
        raise PayloadUnreadable(f"a stored payload under key id {key_id!r} does not open with this "
                                f"process's key of that id (another key under the same id, or the "
                                f"payload was altered)", key_id=key_id) from None


def blob_names(text: str) -> set[str]:
    """The blobs `text` names (any text a store keeps: retention's collection reads them)."""
    return set(BLOB_REFERENCE.findall(text)) if "~rw1" in text else set()


def _env_number(name: str, text: str, kind: type[int] | type[float]) -> Any:
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{name} is a number, got {text!r}") from None


def _safe_url(url: str | None) -> str | None:
    return None if url is None else url.split("?", 1)[0]


def _compressor() -> Any:
    compressor = getattr(_CONTEXTS, "compressor", None)
    if compressor is None:
        import zstandard

        compressor = _CONTEXTS.compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    return compressor


def _decompress(data: bytes) -> bytes:
    import zstandard

    decompressor = getattr(_CONTEXTS, "decompressor", None)
    if decompressor is None:
        decompressor = _CONTEXTS.decompressor = zstandard.ZstdDecompressor()
    try:
        return bytes(decompressor.decompress(data))
    except zstandard.ZstdError as exc:
        raise PayloadUnreadable(f"a stored payload's zstd frame does not decompress: {exc}") from None


def _key_id(value: object) -> str:
    if not isinstance(value, str) or not _KEY_ID.match(value):
        raise ConfigError(f"codecs: a key id is 1-64 letters, digits, '_' or '-', got {value!r}")
    return value


def _key_bytes(key_id: str, value: object) -> bytes:
    raw: object = value
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4),
                                   validate=True)
        except binascii.Error:
            raise ConfigError(f"codecs: key {key_id!r} is not base64") from None
    if not isinstance(raw, (bytes, bytearray)) or len(raw) not in (16, 24, 32):
        size = len(raw) if isinstance(raw, (bytes, bytearray)) else type(raw).__name__
        raise ConfigError(f"codecs: key {key_id!r} must be 16, 24 or 32 bytes (AES-128/192/256), got {size}")
    return bytes(raw)
