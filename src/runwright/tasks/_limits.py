"""The limits a deployment sets on what runs may carry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..core._payloads import Codecs
from ..core._signals import MAX_PENDING_SIGNALS
from ._serde import DEFAULT_MAX_PAYLOAD_BYTES, encode

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked where values are encoded (arguments, results, events, steps, signals)."""

    # Largest JSON of arguments, a result, a step's result or an event's data. Defaults
    # to serde.DEFAULT_MAX_PAYLOAD_BYTES.
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    # Signals sent to one run and not yet taken by a wait: a send past it is refused
    # (SignalsFull) and keeps nothing (core._signals).
    max_pending_signals: int = MAX_PENDING_SIGNALS
    # How payloads are stored (core._payloads): None keeps them plain JSON, byte for byte.
    # Defaults to None.
    codecs: Codecs | None = None

    def payload(self, value: Any, what: str) -> str:
        """The stored text of a payload (arguments, a result, a step's result, an event's
        data): its JSON, checked against the size limit before any codec, then sealed by
        the codecs (compressed, encrypted) when there are any."""
        text = encode(value, what, self.max_payload_bytes)
        return text if self.codecs is None else self.codecs.seal(text)

    async def stored(self, value: Any, what: str) -> str:
        """`payload`, for the engine's async code: a payload that may be offloaded is sealed
        in a thread, so that the blob store's write (a file's fsync, an S3 round trip) does
        not hold the worker's event loop. Without offloading, `payload` as it is."""
        text = encode(value, what, self.max_payload_bytes)
        if self.codecs is None:
            return text
        if self.codecs.may_offload(text):
            return await asyncio.to_thread(self.codecs.seal, text)
        return self.codecs.seal(text)
