"""Which delivery a tool gets from its MCP annotations, when its user does not say.

MCP's hints describe the tool, not the call: a read-only tool can be called again safely;
an idempotent one too, if the far side can tell the calls apart (so it gets a stable key); a
destructive one must not be repeated after a crash whose outcome is unknown. The hints are
advisory (the spec says a client must not trust a server it does not trust), so the user's
own choice always wins.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..agents._tools import DELIVERIES, Delivery
from ..errors import ConfigError

__all__ = ["delivery_from_annotations"]


def delivery_from_annotations(annotations: Mapping[str, Any] | Any | None,
                              override: str | None = None) -> Delivery:
    """The delivery for a tool: `override` when given; else idempotent (at-least-once, with
    a stable key the call carries in its `_meta`) for a read-only or idempotent tool, and
    at-most-once for any other (MCP's default is destructive: a tool that claims nothing may
    destroy, and one that only adds would add twice)."""
    if override is not None:
        if override not in DELIVERIES:
            raise ConfigError(f"tool delivery must be one of {', '.join(DELIVERIES)}, got {override!r}")
        return override  # type: ignore[return-value]
    hints = _as_mapping(annotations)
    if hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True:
        return "idempotent"
    return "at_most_once"


def _as_mapping(annotations: Mapping[str, Any] | Any | None) -> Mapping[str, Any]:
    if annotations is None:
        return {}
    if isinstance(annotations, Mapping):
        return annotations
    dump = getattr(annotations, "model_dump", None)  # mcp.types.ToolAnnotations
    if callable(dump):
        return dump(by_alias=True, exclude_none=True)  # type: ignore[no-any-return]
    return {name: getattr(annotations, name) for name in
            ("readOnlyHint", "idempotentHint", "destructiveHint") if hasattr(annotations, name)}
