"""Blob stores: where payloads above `Codecs(offload_over=...)` are kept, out of the database.

A payload offloaded is written here first (compressed and encrypted already, when those
codecs are on), under a name of its own, and only then is its row written, holding a
small envelope that names the blob (core._payloads). So a crash between the two leaves
at most a blob no row names (an orphan), never a row naming a blob that is not there.

Names are random (128 bits), one per payload sealed, not the content's hash: a name that
two unrelated payloads could share would make "no row names it any more" depend on every
writer, and a blob written again after a collection judged it unreferenced could be lost.
A row's stored text copied whole into another row (a schedule's arguments into each run
it fires) does share its blob; collection keeps a blob while any row names it.

Collection (`Sweeper.collect_blobs`, in a retention pass, engine._sweeper): list the blobs older
than a grace period, read the names every row of the store refers to, delete the others.
The grace covers the time between a blob's write and its row's commit (a slow commit, a
retried one): a blob younger than it is never judged. Its cut-off is taken before the
store is read, so a blob old enough to be judged had its row committed before the read.
This collects the blobs of reclaimed runs, of trimmed logs and histories, and the orphans
of a crash, in whichever pass comes next.

Two stores: the local filesystem (`file:///path`: one file per blob, written to a
temporary name and renamed, fsynced before the row is written), and S3-compatible storage
(`s3://bucket/prefix?endpoint=URL&region=NAME`, through boto3; credentials from boto3's
usual chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, an instance role).
Calls are synchronous (a payload is sealed and opened synchronously); the engine seals a
payload that may be offloaded in a thread (Limits.stored), so a write does not hold a
worker's event loop. A read holds the calling thread for its round trip.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import ConfigError, PayloadUnreadable, StoreError

__all__ = ["BLOB_NAME", "BlobStore", "FileBlobs", "S3Blobs", "blob_store", "collectable",
           "install_blobs", "new_name", "read_blob"]

BLOB_NAME = re.compile(r"^[0-9a-f]{32}$")
_S3_KEEP_EVERY = 1000  # S3's DeleteObjects takes at most 1000 keys a call


def new_name() -> str:
    return secrets.token_hex(16)


class BlobStore(Protocol):
    url: str  # without credentials: what an error names

    def put(self, name: str, data: bytes) -> None:
        """Keep `data` under `name`, durably, before returning."""

    def get(self, name: str) -> bytes:
        """The bytes under `name`; PayloadUnreadable when there are none."""

    def listing(self) -> Iterator[tuple[str, float]]:
        """Every blob's (name, time written, epoch seconds by the store's clock)."""

    def delete(self, names: list[str]) -> None:
        """Remove these blobs (a name already gone is no error)."""


def _missing(name: str, where: str) -> PayloadUnreadable:
    return PayloadUnreadable(f"a stored payload's blob {name} is missing from {where} (deleted, or "
                             f"another blob store than the one that wrote it); set the App's "
                             f"Codecs(blobs=...) or RUNWRIGHT_PAYLOAD_BLOBS to that store", blob=name)


class FileBlobs:
    """One file a blob, `<root>/<first two hex>/<name>`, so no directory grows past 1/256 of them."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.url = f"file://{root}"

    def _path(self, name: str) -> Path:
        return self.root / name[:2] / name

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}")
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())  # on disk before the row that names it is committed
        os.replace(temporary, path)

    def get(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise _missing(name, self.url) from None
        except OSError as exc:
            raise PayloadUnreadable(f"a stored payload's blob {name} cannot be read from {self.url}: "
                                    f"{exc.strerror or exc}") from None

    def listing(self) -> Iterator[tuple[str, float]]:
        if not self.root.is_dir():
            return
        for folder in os.scandir(self.root):
            if not folder.is_dir() or len(folder.name) != 2:
                continue
            for entry in os.scandir(folder.path):
                if BLOB_NAME.match(entry.name):
                    try:
                        yield entry.name, entry.stat().st_mtime
                    except FileNotFoundError:  # deleted by another collection meanwhile
                        continue

    def delete(self, names: list[str]) -> None:
        for name in names:
            try:
                self._path(name).unlink()
            except FileNotFoundError:
                pass


class S3Blobs:
    """One object a blob, `<prefix>/<first two hex>/<name>`, in an S3-compatible bucket (boto3)."""

    def __init__(self, bucket: str, prefix: str, endpoint: str | None, region: str | None) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self._endpoint, self._region = endpoint, region
        self.url = f"s3://{bucket}/{self.prefix}" + (f" at {endpoint}" if endpoint else "")
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        # One client for the process (boto3's clients are thread-safe), made on first use:
        # importing boto3 costs ~0.2 s, paid only by a process that meets a blob.
        with self._lock:
            if self._client is None:
                try:
                    import boto3
                except ImportError:
                    raise ConfigError("an s3:// blob store needs boto3: "
                                      "pip install 'runwright[s3]'") from None
                self._client = boto3.client("s3", endpoint_url=self._endpoint, region_name=self._region)
            return self._client

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name[:2]}/{name}" if self.prefix else f"{name[:2]}/{name}"

    def put(self, name: str, data: bytes) -> None:
        with self._failing(f"cannot write blob {name}"):
            self.client().put_object(Bucket=self.bucket, Key=self._key(name), Body=data)

    @contextlib.contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """boto3's errors as the store's: a StoreError, which a worker's side task (the
        retention pass) logs and retries, as it does its database failing."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"payload blob store {self.url}: {what}: {exc}") from None

    def get(self, name: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return bytes(self.client().get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read())
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise _missing(name, self.url) from None
            raise PayloadUnreadable(f"a stored payload's blob {name} cannot be read from {self.url}: "
                                    f"{code or exc}") from None
        except BotoCoreError as exc:
            raise PayloadUnreadable(f"a stored payload's blob {name} cannot be read from {self.url}: "
                                    f"{exc}") from None

    def listing(self) -> Iterator[tuple[str, float]]:
        with self._failing("cannot list the blobs"):
            pages = self.client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else "")
            found = [(item["Key"].rpartition("/")[2], item["LastModified"].timestamp())
                     for page in pages for item in page.get("Contents", ())]
        yield from ((name, written) for name, written in found if BLOB_NAME.match(name))

    def delete(self, names: list[str]) -> None:
        for start in range(0, len(names), _S3_KEEP_EVERY):
            chunk = names[start:start + _S3_KEEP_EVERY]
            with self._failing("cannot delete blobs"):
                self.client().delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self._key(name)} for name in chunk], "Quiet": True})


def blob_store(url: str) -> BlobStore:
    """The blob store a URL names: file:///absolute/path or s3://bucket/prefix?endpoint=&region=."""
    if not isinstance(url, str):
        raise ConfigError(f"codecs: blobs is a URL (file:///path or s3://bucket/prefix), "
                          f"got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise ConfigError(f"codecs: a file blob store is file:///absolute/path, got {url!r}")
        return FileBlobs(path)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"codecs: an S3 blob store is s3://bucket/prefix, got {url!r} (no bucket)")
        query = parse_qs(parts.query)
        unknown = set(query) - {"endpoint", "region"}
        if unknown:
            raise ConfigError(f"codecs: an S3 blob store takes ?endpoint= and ?region=, got "
                              f"{', '.join(sorted(unknown))}")
        return S3Blobs(parts.netloc, unquote(parts.path), query.get("endpoint", [None])[0],
                       query.get("region", [None])[0])
    raise ConfigError(f"codecs: blobs is file:///path or s3://bucket/prefix, got {url!r}")


# Every blob store this process was given (by URL), newest last: envelopes do not name
# their store, so a read looks in each (one, in a deployment; tests make several).
_INSTALLED: dict[str, BlobStore] = {}


def install_blobs(url: str | None) -> BlobStore | None:
    """The blob store `url` names, added to those this process reads offloaded payloads from."""
    if url is None:
        return None
    store = _INSTALLED.get(url)
    if store is None:
        store = _INSTALLED[url] = blob_store(url)
    return store


def read_blob(name: str) -> bytes:
    """The blob `name` from whichever of this process's blob stores holds it."""
    if not _INSTALLED:
        raise PayloadUnreadable(f"a stored payload was offloaded to a blob store (blob {name}), and "
                                f"this process has none; set the App's Codecs(blobs=...) or "
                                f"RUNWRIGHT_PAYLOAD_BLOBS")
    stores = list(_INSTALLED.values())
    for store in reversed(stores):
        try:
            return store.get(name)
        except PayloadUnreadable as exc:
            if exc.blob is None:  # there, and unreadable: no other store will do
                raise
    raise _missing(name, ", ".join(store.url for store in stores))


def collectable(store: BlobStore, grace_s: float, now: float | None = None) -> list[str]:
    """The blobs old enough to be judged: written more than `grace_s` before now. Taken
    before the store's rows are read (see the module's docstring)."""
    cut = (time.time() if now is None else now) - grace_s
    return [name for name, written in store.listing() if written <= cut]
