"""Retention's rules, without a store: where a log is cut, which runs a thread cap takes,
and which settings are refused."""

from __future__ import annotations

import pytest

from runwright.engine._sweeper import Retention
from runwright.errors import ConfigError
from runwright.runs import Run, RunState
from runwright.store import _rules as rules


def test_a_log_is_cut_behind_a_marker_naming_the_first_seq_kept() -> None:
    assert rules.trim_marker(last_seq=10, trimmed_seq=0, keep=10) is None
    assert rules.trim_marker(last_seq=11, trimmed_seq=0, keep=10) == (1, {"first_seq": 2, "removed": 1})
    assert rules.trim_marker(last_seq=30, trimmed_seq=5, keep=10) == (20, {"first_seq": 21, "removed": 20})
    assert rules.trim_marker(last_seq=15, trimmed_seq=5, keep=10) is None, "cut as far already"


def _run(run_id: int, thread: str | None, state: RunState, tenant: str | None = None) -> Run:
    return Run(run_id, f"k{run_id}", "t", "default", 2, state, "{}", 0, 1, 0, 0.0, 0.0,
               thread=thread, tenant=tenant)


def test_a_thread_cap_takes_the_older_ended_runs_of_each_thread() -> None:
    done, queued = RunState.SUCCEEDED, RunState.QUEUED
    runs = [_run(1, "a", done), _run(2, "a", queued), _run(3, "a", done), _run(4, "a", done),
            _run(5, "b", done), _run(6, None, done), _run(7, "a", done, tenant="x"),
            _run(8, "a", done, tenant="x")]
    assert rules.runs_beyond_thread_cap(runs, keep=2) == [1], "2 is open: it stays, and counts"
    assert rules.runs_beyond_thread_cap(runs, keep=1) == [1, 3, 7]


@pytest.mark.parametrize("setting", [{"max_age_s": 0}, {"max_events": 0}, {"thread_max_runs": 0}])
def test_a_bound_out_of_range_is_refused(setting: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(setting))):
        Retention(**setting)  # type: ignore[arg-type]
    assert Retention().keeps_everything
