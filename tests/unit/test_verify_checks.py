"""The checks of `runwright verify` must be able to fail: handed a crafted ledger and
store records with a lost run, a repeated step, an at-most-once step run twice, a
zombie's durable write or a gap in an event log, each is counted and the exit is 1.
And the fault schedule is a function of the seed."""

from __future__ import annotations

import json

import pytest

from runwright.cli._verifying import exit_code, parse_duration
from runwright.core._journal import Event, StepRecord
from runwright.runs import Run, RunState
from runwright.verify import Ledger, RunData, check, schedule
from runwright.verify._place import place_for

T0 = 1_000_000.0


def run(run_id: int, state: RunState = RunState.SUCCEEDED, fence: int = 1, last_seq: int = 0) -> Run:
    return Run(id=run_id, key=f"k{run_id}", task="verify_run", queue="verify", priority=2, state=state,
               args="{}", attempt=1, max_attempts=6, fence=fence, run_at=T0, created_at=T0,
               finished_at=T0 + 5, last_seq=last_seq)


def events(run_id: int, *kinds: tuple[str, dict], start: float = T0) -> list[Event]:
    return [Event(run_id, seq, kind, data, start + seq * 0.1) for seq, (kind, data) in enumerate(kinds, 1)]


def step(run_id: int, name: str, fence: int, token: str, at: float = T0 + 0.15) -> StepRecord:
    return StepRecord(run_id, 0, name, "done", json.dumps({"token": token, "fence": fence}), None,
                      fence, at)


def healthy(run_id: int) -> RunData:
    """One step journaled by fence 1, its progress event, a clean end."""
    log = events(run_id, ("submitted", {}), ("started", {"fence": 1}), ("step", {}),
                 ("progress", {"fence": 1}), ("succeeded", {}))
    return RunData(run(run_id, last_seq=len(log)), log, [step(run_id, "step-0", 1, f"t{run_id}")])


def ledger_of(*lines: str) -> Ledger:
    ledger = Ledger()
    for line in lines:
        ledger.add(line)
    return ledger


def test_a_clean_ledger_has_no_violation():
    found = check([1], {1: healthy(1)}, ledger_of("step 1 step-0 1 t1", "once 1 1"))
    assert found.ok and found.finished == 1 and found.succeeded == 1
    assert exit_code(found) == 0


def test_an_execution_before_the_journaled_one_is_allowed():
    # Fence 1 ran the step and died before its journal write; fence 2 ran it and journaled it.
    data = healthy(1)
    data.steps[:] = [step(1, "step-0", 2, "t2")]
    data.events[1] = Event(1, 2, "started", {"fence": 2}, T0 + 0.05)
    data.events[3] = Event(1, 4, "progress", {"fence": 2}, T0 + 0.4)
    found = check([1], {1: data}, ledger_of("step 1 step-0 1 t1", "step 1 step-0 2 t2"))
    assert found.ok, found.violations()


def test_a_lost_run_is_counted_and_fails():
    data = healthy(2)
    data.run.state = RunState.RUNNING
    found = check([1, 2, 3], {1: healthy(1), 2: data}, Ledger())  # 3: not in the store at all
    assert found.lost == [2, 3]
    assert found.violations()["lost"] == 2
    assert exit_code(found) == 1


def test_a_step_executed_again_after_its_journal_write_is_counted():
    # The journal holds fence 1's result; fence 2 ran the step again all the same.
    found = check([1], {1: healthy(1)}, ledger_of("step 1 step-0 1 t1", "step 1 step-0 2 other"))
    assert found.violations()["steps_reexecuted"] == 1
    # ... and so is a second execution within the very attempt that journaled it.
    found = check([1], {1: healthy(1)}, ledger_of("step 1 step-0 1 t1", "step 1 step-0 1 again"))
    assert found.violations()["steps_reexecuted"] == 1
    assert exit_code(found) == 1


def test_an_at_most_once_step_run_twice_is_counted():
    found = check([1], {1: healthy(1)}, ledger_of("step 1 step-0 1 t1", "once 1 1", "once 1 2"))
    assert found.at_most_once == [1] and not found.ok


def test_a_ledger_in_a_runs_log_counts_a_repeated_line_once_and_two_executions_twice():
    # verify --fleet's ledger: lines appended as events; an append retried after its reply
    # was lost repeats its line (same token), which is one execution, not two.
    lines = ["once 1 1 a", "once 1 1 a", "step 1 step-0 1 t1", "step 1 step-0 1 t1"]
    log = events(9, *(("ledger", {"line": line}) for line in lines), ("progress", {"fence": 1}))
    ledger = Ledger.of_events(log)
    assert check([1], {1: healthy(1)}, ledger).ok
    assert ledger.once[1] == [1] and ledger.steps[(1, "step-0")] == [(1, "t1")]
    twice = Ledger.of_events([*log, *events(9, ("ledger", {"line": "once 1 2 b"}))])
    assert check([1], {1: healthy(1)}, twice).at_most_once == [1]


def test_a_zombie_event_after_a_newer_claim_is_counted():
    log = events(1, ("submitted", {}), ("started", {"fence": 1}), ("recovered", {}),
                 ("started", {"fence": 2}), ("progress", {"fence": 1}), ("succeeded", {}))
    found = check([1], {1: RunData(run(1, fence=2, last_seq=len(log)), log, [])}, Ledger())
    assert found.violations()["zombie_writes_durable"] == 1
    assert found.takeovers_s == [pytest.approx(0.1)]  # started (seq 2) -> recovered (seq 3)


def test_a_zombie_journal_write_after_a_newer_claim_is_counted():
    data = healthy(1)
    data.events[3:] = [Event(1, 4, "started", {"fence": 2}, T0 + 0.4),
                       Event(1, 5, "succeeded", {}, T0 + 0.5)]
    data.run.last_seq = 5
    data.steps[:] = [step(1, "step-0", 1, "t1", at=T0 + 1.0)]  # fence 1's, after fence 2 claimed
    found = check([1], {1: data}, ledger_of("step 1 step-0 1 t1"))
    assert found.violations()["zombie_writes_durable"] == 1


def test_gaps_and_repeats_in_an_event_log_are_counted():
    gap = healthy(1)
    del gap.events[2]
    repeat = healthy(2)
    repeat.events.insert(2, repeat.events[1])
    twice_ended = healthy(3)
    twice_ended.events.append(Event(3, 6, "succeeded", {}, T0 + 1))
    twice_ended.run.last_seq = 6
    found = check([1, 2, 3], {1: gap, 2: repeat, 3: twice_ended}, Ledger())
    assert found.violations()["stream_gaps_or_repeats"] == 3


def test_a_dead_run_of_a_workload_that_cannot_fail_is_counted():
    data = healthy(1)
    data.run.state = RunState.DEAD
    found = check([1], {1: data}, Ledger())
    assert found.failed == [1] and exit_code(found) == 1


def test_a_cut_short_ledger_line_is_ignored():
    assert not ledger_of("step 1 ste").steps


def test_the_same_seed_makes_the_same_schedule():
    every = {"kill": 2.0, "stall": 10.0, "blip": 5.0}
    first = schedule(42, 5, every, 120)
    assert first == schedule(42, 5, every, 120)
    assert first != schedule(43, 5, every, 120)
    assert {f.kind for f in first} == {"kill", "stall", "blip"}
    assert all(0 <= f.slot < 5 for f in first) and [f.at_s for f in first] == sorted(f.at_s for f in first)
    assert not [f for f in schedule(42, 5, {**every, "stall": 0}, 120) if f.kind == "stall"]


def test_verify_gets_a_place_of_its_own():
    pg = place_for("postgresql://u@h/db?schema=prod&sslmode=disable")
    assert pg.backend == "postgres" and pg.name.startswith("rw_verify_")
    assert f"schema={pg.name}" in pg.url and "prod" not in pg.url and "sslmode=disable" in pg.url
    assert "schema" not in pg.admin_url
    redis = place_for("redis://h:6379/0?namespace=prod")
    assert redis.url.endswith(f"namespace={redis.name}") and "prod" not in redis.url
    sqlite = place_for("sqlite:////data/app.db")
    assert sqlite.url == f"sqlite:////data/{sqlite.name.rsplit('/', 1)[1]}"


def test_durations():
    assert [parse_duration(t, "--x") for t in ("2s", "500ms", "1m", "3", "0")] == [2.0, 0.5, 60.0, 3.0, 0.0]
