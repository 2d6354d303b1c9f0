"""The limits a deployment sets on what runs may carry."""

from __future__ import annotations

from dataclasses import dataclass

from ._serde import DEFAULT_MAX_PAYLOAD_BYTES

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds checked where values are encoded (arguments, results, events, steps)."""

    # Largest JSON of arguments, a result, a step's result or an event's data. Defaults
    # to serde.DEFAULT_MAX_PAYLOAD_BYTES.
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
