"""The store's gauges label only configured queues: the rest fold into "other"."""

from __future__ import annotations

from runwright.observe._metrics import OTHER_QUEUE, fold_queues


def test_unconfigured_queues_fold_into_other_keeping_the_oldest_due():
    stats = [("default", "queued", 2, 50.0), ("mine-1", "queued", 3, 40.0), ("mine-2", "queued", 1, None),
             ("mine-3", "queued", 4, 30.0), ("mine-1", "succeeded", 5, None)]
    folded = {(queue, state): (count, oldest)
              for queue, state, count, oldest in fold_queues(stats, {"default"})}
    assert folded == {("default", "queued"): (2, 50.0), (OTHER_QUEUE, "queued"): (8, 30.0),
                      (OTHER_QUEUE, "succeeded"): (5, None)}
