"""What the demo's and verify's tables call their rows: a figure that is expected (runs
started again after a kill) reads as expected, not as a failure beside the OK line; the
processes that served a `verify --fleet` session are counted in the same words at its
start and in its report, restarted processes included, in the singular for one; every
column of `runwright thread list` has a name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from runwright.cli import _demo as demo
from runwright.runs import Run, RunState
from runwright.verify._report import obeying, print_report, processes

T0 = 1_000_000.0


def _run(run_id: int, recoveries: int) -> Run:
    return Run(id=run_id, key=f"k{run_id}", task="demo_job", queue="default", priority=2,
               state=RunState.SUCCEEDED, args=f'{{"n": {run_id}}}', attempt=1, max_attempts=3, fence=1,
               run_at=T0, created_at=T0, result=str(run_id * run_id), recoveries=recoveries)


def test_the_demo_says_its_restarted_runs_were_taken_over_and_finished_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "1.log").write_text("1 1 1\n2 1 1\n")  # pid 1 started runs 1 and 2, then was killed
    (tmp_path / "2.log").write_text("2 2 2\n3 1 2\n")  # pid 2 took run 2 over, and ran run 3
    console = Console(record=True, width=200)
    monkeypatch.setattr(demo, "console", console)
    assert demo._report([_run(1, 0), _run(2, 1), _run(3, 0)], str(tmp_path), 1.0, demo.Kill(1, [2], 2), 2)
    text = console.export_text()
    assert "runs started again after the kill (taken over; each still finished once) │ 1" in text
    assert "more than once" not in text
    assert "OK: every run finished, exactly once" in text


def _fleet_report(serving: int, obeyed: int) -> dict[str, Any]:
    return {
        "ok": True, "backend": "sqlite", "seed": 1,
        "fleet": {"workers_serving": serving, "workers_obeying_faults": obeyed},
        "runs": {"submitted": 1, "checked": 1, "finished": 1, "succeeded": 1, "cancelled": 0},
        "violations": dict.fromkeys(["lost", "failed", "steps_reexecuted", "at_most_once_violations",
                                     "zombie_writes_durable", "stream_gaps_or_repeats"], 0),
        "faults": {"kills": 0, "stalls": 0, "blips": 0, "connections_cut": 0, "writers_killed": 0,
                   "worker_exits": 0},
        "takeover_s": {"count": 0, "p50": None, "p99": None},
        "throughput_runs_per_s": {"baseline": None, "during_faults": None, "ratio": None},
        "examples": {},
    }


def test_verify_counts_the_processes_that_served_a_fleet_session_in_one_set_of_words() -> None:
    assert (processes(1), processes(2), obeying(1), obeying(0)) == (
        "1 worker process", "2 worker processes", "1 obeys faults", "0 obey faults")
    console = Console(record=True, width=200)
    print_report(_fleet_report(7, 1), console, as_json=False)
    assert re.search(r"worker processes that served the session \(a restarted one counts again\) +│ +"
                     r"7 \(1 obeys faults\)", console.export_text())


def test_every_column_of_the_thread_list_is_named() -> None:
    from runwright.cli._views import threads_table
    from runwright.store._params import ThreadInfo

    table = threads_table([ThreadInfo("chat", "acme", 1, T0, runs=2, open_runs=1, last_run_id=7,
                                      last_run_state=RunState.RUNNING),
                           ThreadInfo("old", None, 1, T0, deleted_at=T0 + 1),
                           ThreadInfo("quiet", None, 1, T0, runs=1, last_run_id=3,
                                      last_run_state=RunState.SUCCEEDED)], full=True)
    assert [str(column.header) for column in table.columns][-2:] == ["state", "now"]
    console = Console(record=True, width=200)
    console.print(table)
    rows = {line.split("│")[1].strip(): line.split("│")[-2].strip()
            for line in console.export_text().splitlines() if line.startswith("│ ")}
    assert rows == {"chat": "busy", "old": "deleted", "quiet": "idle"}
