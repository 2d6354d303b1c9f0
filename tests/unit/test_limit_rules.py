"""The limited claim's pick over a backlog of one full key: the runs of a key found full
are skipped by their limits text (decided once), and the keys full already before the
walk are named for the store to leave out of it."""

from __future__ import annotations

from runwright.store import _limit_rules as limit_rules

A = '[["per-tenant","A",2]]'
B = '[["per-tenant","B",2]]'


def test_a_full_keys_text_is_held_once_and_the_runs_behind_it_of_other_keys_are_taken() -> None:
    running = {"per-tenant:A": 2}
    held: set[str] = set()
    candidates = [(1, A), (2, A), (3, B), (4, A), (5, B), (6, B)]
    assert limit_rules.pick(candidates, running, {}, 10, held) == [3, 5]
    assert held == {A, B}  # B filled up by the claim's own takes
    assert running == {"per-tenant:A": 2, "per-tenant:B": 2}


def test_a_text_already_held_is_skipped_without_a_look() -> None:
    # Held by the caller: its runs are not taken even where the counts would allow them
    # (the store computed it from counts that only grow within the claim).
    assert limit_rules.pick([(1, A), (2, B)], {}, {}, 10, {A}) == [2]


def test_full_names_the_running_texts_whose_keys_have_no_room() -> None:
    running = limit_rules.running_by_slot([A, A, B])
    assert limit_rules.full([A, A, B, None], running, {}) == {A}
    # An operator's override counts as the pick's does: B's key lowered to 1 is full.
    assert limit_rules.full([A, B], running, {"per-tenant:B": 1}) == {A, B}
    assert limit_rules.full([A, B], running, {"per-tenant": 3}) == set()
