"""The fleet's rules, decided once for every transport, on rows built by hand."""

from __future__ import annotations

from runwright.fleet._broadcast import Outcome, Tally
from runwright.fleet._presence import (
    Census,
    Life,
    Presence,
    State,
    choose_ordinal,
    departed,
    parse_name,
    reads_as,
)

NOW = 1000.0


def row(ordinal: int, generation: int = 1, state: State = State.READY, age_s: float = 0.0,
        kind: str = "worker", ttl_s: float = 10.0) -> Presence:
    beat = NOW - age_s
    return Presence(kind, ordinal, generation, state, "host", 100 + ordinal, 0.0, beat - 5, beat,
                    beat + ttl_s)


def test_a_new_life_takes_the_lowest_ordinal_no_live_row_holds():
    census = Census([row(1), row(3), row(2, age_s=11), row(1, kind="server")], NOW)
    assert choose_ordinal(census, "worker") == 2  # worker-2's TTL passed: free
    assert choose_ordinal(census, "server") == 2
    assert choose_ordinal(Census([], NOW), "worker") == 1


def test_a_row_past_the_freshness_gate_reads_stale_whatever_it_wrote():
    census = Census([row(1, state=State.RECYCLING, age_s=4)], NOW)
    assert reads_as(census, census.rows[0], stale_s=3) == "stale"
    assert reads_as(census, census.rows[0], stale_s=5) == "recycling"


def test_a_life_departs_when_its_slot_is_absent_or_a_newer_generation_holds_it():
    life = Life("worker", 1, 4)
    assert not departed(life, Census([row(1, generation=4)], NOW))
    assert departed(life, Census([row(1, generation=5)], NOW))
    assert departed(life, Census([row(1, generation=4, age_s=11)], NOW))
    assert departed(life, Census([], NOW))


def test_a_tally_classifies_every_process_and_only_its_sent_lives_count():
    census = Census([row(1), row(2), row(3), row(4), row(5, state=State.RESYNCING),
                     row(6, state=State.RECYCLING), row(7, age_s=4)], NOW)
    tally = Tally(census, stale_s=3)
    tally.reply("worker-1", 1, "applied", detail={"ok": 1})
    tally.reply("worker-2", 1, "failed", error="boom")
    tally.reply("worker-3", 1, "ack")
    tally.reply("worker-4", 2, "applied")  # a newer life of worker-4: not the one sent to
    tally.reply("worker-7", 1, "applied")  # stale when sent: not waited for, not counted
    assert not tally.settled
    tally.recheck(Census([row(1), row(2), row(3), row(4, generation=2)], NOW + 1))
    report = {r.name: (r.outcome, r.error) for r in tally.close()}
    assert report == {"worker-1": (Outcome.APPLIED, None), "worker-2": (Outcome.FAILED, "boom"),
                      "worker-3": (Outcome.TIMED_OUT, None), "worker-4": (Outcome.DEPARTED, None),
                      "worker-5": (Outcome.RESYNCING, None), "worker-6": (Outcome.RECYCLING, None),
                      "worker-7": (Outcome.STALE, None)}


def test_a_silent_live_process_reads_missing_and_targets_narrow_the_report():
    census = Census([row(1), row(2)], NOW)
    tally = Tally(census, stale_s=3, targets=["worker-2"])
    assert [life.name for life in tally.expected] == ["worker-2"]
    assert [(r.name, r.outcome) for r in tally.close()] == [("worker-2", Outcome.MISSING)]


def test_slot_names_parse():
    assert parse_name("worker-12") == ("worker", 12)
    assert parse_name("gpu-worker-3") == ("gpu-worker", 3)
    assert parse_name("worker") is None and parse_name("worker-0") is None
