"""The delivery an MCP tool gets from its annotations, and the user's word over them."""

from __future__ import annotations

import pytest
from mcp.types import ToolAnnotations

import runwright as rw
from runwright.integrations import delivery_from_annotations


@pytest.mark.parametrize(("hints", "delivery"), [
    ({"readOnlyHint": True}, "idempotent"),
    ({"idempotentHint": True, "destructiveHint": True}, "idempotent"),
    ({"destructiveHint": True}, "at_most_once"),
    ({"destructiveHint": False}, "at_most_once"),  # additive: a repeat would add twice
    ({}, "at_most_once"),
    (None, "at_most_once"),
])
def test_annotations_choose_the_delivery(hints, delivery):
    assert delivery_from_annotations(hints) == delivery
    if hints is not None:
        assert delivery_from_annotations(ToolAnnotations(**hints)) == delivery


def test_the_users_word_wins_and_is_checked():
    assert delivery_from_annotations({"readOnlyHint": True}, "at_most_once") == "at_most_once"
    with pytest.raises(rw.ConfigError, match="must be one of"):
        delivery_from_annotations(None, "twice")
