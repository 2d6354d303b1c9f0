"""The worker's per-run counter and histogram expose exactly what prometheus_client's own
metrics would for the same observations (only the `_created` times differ)."""

from __future__ import annotations

import re
import sys
import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from runwright.engine._tallies import HotCounter, HotHistogram

BUCKETS = (0.001, 0.01, 1, 2.5)


def _text(registry: CollectorRegistry) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())


def test_the_exposition_is_prometheus_clients_own() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    histogram = Histogram("wait_seconds", "Waits.", ["queue"], buckets=BUCKETS, registry=theirs)
    counter = Counter("ends_total", "Ends.", ["task", "outcome"], registry=theirs)
    hot_histogram = HotHistogram("wait_seconds", "Waits.", ["queue"], buckets=BUCKETS, registry=ours)
    hot_counter = HotCounter("ends_total", "Ends.", ["task", "outcome"], registry=ours)
    for queue, value in [("a", 0.0), ("a", 0.001), ("a", 0.0011), ("b", 2.5), ("b", 3.0), ("a", 99.0)]:
        histogram.labels(queue).observe(value)
        hot_histogram.observe((queue,), value)
    for task, outcome, amount in [("t", "succeeded", 1), ("t", "failed", 2), ("t", "succeeded", 3)]:
        counter.labels(task, outcome).inc(amount)
        hot_counter.inc((task, outcome), amount)
    assert _text(ours) == _text(theirs)
    assert ours.get_sample_value("wait_seconds_bucket", {"queue": "a", "le": "0.001"}) == 2
    assert hot_counter.value(("t", "succeeded")) == 4 and hot_histogram.count(("a",)) == 4


def test_no_count_is_lost_to_threads() -> None:
    counter = HotCounter("hits_total", "Hits.", ["kind"], registry=None)
    histogram = HotHistogram("took_seconds", "Took.", ["kind"], buckets=BUCKETS, registry=None)

    def hit() -> None:
        for _ in range(100_000):
            counter.inc(("x",))
            histogram.observe(("x",), 0.5)

    threads = [threading.Thread(target=hit) for _ in range(4)]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads swap between bytecodes: an unguarded add loses counts
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switching)
    assert counter.value(("x",)) == 400_000 and histogram.count(("x",)) == 400_000
