"""The summary's percentiles and throughput, from a sample of ended runs (the store's)."""

from __future__ import annotations

from runwright.observe._metrics import latency_summary, percentiles

NOW = 1_800_000_000.0


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}
    assert percentiles([3.0]) == {"p50": 3.0, "p95": 3.0, "p99": 3.0}
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, in any order
    assert percentiles(values) == {"p50": 50.0, "p95": 95.0, "p99": 99.0}


def test_latencies_come_from_started_runs_and_throughput_from_the_last_minute() -> None:
    # (run_at, started_at, finished_at), latest ended first.
    sample = [(NOW - 10, NOW - 9, NOW - 1), (NOW - 20, None, NOW - 2),  # a cancel: never started
              (NOW - 300, NOW - 298, NOW - 290)]  # ended 290 s ago: in the window, not the minute
    summary = latency_summary(sample, NOW)
    assert summary["latency_sample"] == 3
    assert summary["submit_to_start_s"] == {"p50": 1.0, "p95": 2.0, "p99": 2.0}
    assert summary["run_duration_s"] == {"p50": 8.0, "p95": 8.0, "p99": 8.0}
    assert (summary["throughput_per_min"], summary["throughput_estimated"]) == (2.0, False)


def test_a_saturated_sample_estimates_throughput_over_its_span() -> None:
    # 4 runs ended in the last 2 s and the sample holds no more: 2 per second, 120 a minute.
    sample = [(NOW - 3, NOW - 3, NOW - i * 0.5) for i in range(1, 5)]
    summary = latency_summary(sample, NOW, limit=4)
    assert (summary["throughput_per_min"], summary["throughput_estimated"]) == (120.0, True)
