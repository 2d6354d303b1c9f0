"""The dashboard's chart buckets: each ended run counted in the bucket it ended in, its
latencies as /summary defines them, and no bucket claimed when the sample cannot tell."""

from __future__ import annotations

from runwright.server._series import buckets

NOW = 10_000.0


def test_each_run_lands_in_the_bucket_it_ended_in() -> None:
    # (run_at, started_at, finished_at), latest ended first, as the store gives them.
    sample = [(9_990.0, 9_992.0, 9_995.0), (9_950.0, 9_951.0, 9_990.0), (9_930.0, None, 9_935.0),
              (9_000.0, 9_004.0, 9_010.0)]
    out = buckets(sample, NOW, window_s=300, step_s=60)
    # Buckets end at the next multiple of the step after now: the last one holds now.
    assert out["t"] == [9_720.0, 9_780.0, 9_840.0, 9_900.0, 9_960.0]
    assert out["ended"] == [0, 0, 0, 1, 2]  # the run ended at 9010 is outside the window
    last = out["ended"].index(2)
    assert out["throughput_per_min"][last] == 2.0
    waits, runs = out["submit_to_start_s"], out["run_duration_s"]
    assert (waits["p50"][last], waits["p99"][last]) == (1.0, 2.0)  # nearest rank: values that occurred
    assert (runs["p50"][last], runs["p99"][last]) == (3.0, 39.0)
    # A run cancelled before it started counts as ended, with no latency.
    assert out["ended"][last - 1] == 1 and waits["p50"][last - 1] is None
    assert out["complete_since"] == out["t"][0]


def test_a_full_sample_leaves_the_older_buckets_unknown() -> None:
    sample = [(NOW - 5, NOW - 4, NOW - 1 - i) for i in range(100)]  # 100 runs over the last 100 s
    out = buckets(sample, NOW, window_s=600, step_s=60, limit=100)
    oldest_end = sample[-1][2]
    assert out["complete_since"] == oldest_end
    for t, ended, rate in zip(out["t"], out["ended"], out["throughput_per_min"]):
        if t < oldest_end:
            assert ended is None and rate is None  # unknown, never a zero
        else:
            assert ended is not None
    assert sum(n for n in out["ended"] if n) <= 100
