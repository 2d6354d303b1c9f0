"""store._fair_rules, the decision every backend's fair claim makes (Redis's claim script
makes the same one in Lua: the conformance scenarios hold both to it)."""

from __future__ import annotations

import json

from runwright.store import _fair_rules as fair_rules
from runwright.store import _limit_rules as limit_rules


def text(key: str | None, *limits: tuple[str, str, int]) -> str:
    fair = [] if key is None else [["fair/t", key, 1]]
    return json.dumps([*(list(limit) for limit in limits), *fair])


def test_a_fair_entry_is_found_only_as_an_entrys_name_and_is_no_limit():
    assert fair_rules.fair_slot(text("acme", ("crm", "x", 2))) == ("fair/t:acme", 1)
    # A limit whose key says "fair/" is a limit all the same.
    assert fair_rules.fair_slot(json.dumps([["crm", "fair/x", 2], ["crm2", '"fair/', 1]])) is None
    assert fair_rules.fair_slot(None) is None
    assert limit_rules.parsed(text("acme", ("crm", "x", 2))) == [("crm", "x", 2)]


def test_order_gives_the_fair_places_to_the_keys_in_turns_and_keeps_the_others_places():
    ids = [1, 2, 3, 4, 5, 6]
    texts = [text("a"), text("a"), text(None, ("crm", "x", 9)), text("a"), text("b"), text("b")]
    state = fair_rules.FairState({}, 0.0)
    out = fair_rules.order(ids, texts, [2] * 6, state, {})
    assert out == [1, 5, 3, 2, 6, 4]
    assert state.passes == {} and state.vt == 0.0, "order simulates; it changes nothing"


def test_order_is_by_priority_first():
    ids = [1, 2, 3]
    texts = [text("a"), text("a"), text("b")]
    state = fair_rules.FairState({"fair/t:a": 5.0}, 4.0)  # a was served last
    assert fair_rules.order(ids, texts, [1, 2, 2], state, {}) == [1, 3, 2]


def test_served_moves_each_keys_pass_by_one_over_its_weight_and_v_with_it():
    state = fair_rules.FairState({"fair/t:a": 1.0}, 1.0)
    overrides = {"fair/t:b": 4, "fair/t": 2}
    fair_rules.served([text("a"), text("b"), text(None), text("b")], state, overrides)
    assert state.passes == {"fair/t:a": 1.5, "fair/t:b": 1.5}
    assert state.changed == {"fair/t:a": 1.5, "fair/t:b": 1.5, "fair/": 1.25}
    # A key idle long (its pass far behind V) comes back at V.
    state = fair_rules.FairState({"fair/t:c": 0.0}, 10.0)
    assert state.start("fair/t:c") == 10.0 and state.start("fair/t:new") == 10.0
