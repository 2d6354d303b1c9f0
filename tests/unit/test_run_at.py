"""`parse_run_at`: the one reading of a run_at given as text or a number (CLI, JSON)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from runwright.errors import InvalidTime
from runwright.tasks._submission import parse_run_at

INSTANT = dt.datetime(2031, 2, 3, 2, 5, 6, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize("value", ["2031-02-03T02:05:06Z", "2031-02-03T04:05:06+02:00",
                                   "2031-02-03 02:05:06+00:00", INSTANT, int(INSTANT), str(INSTANT)])
def test_an_instant_with_a_zone_or_in_epoch_seconds(value: object) -> None:
    assert parse_run_at(value) == INSTANT


@pytest.mark.parametrize("value, message", [
    ("2031-02-03T02:05:06", "has no time zone; add Z or an offset such as +02:00"),
    ("next tuesday", "is neither epoch seconds nor an ISO 8601 time"),
    ("nan", "must be a finite number of seconds"),
    (float("inf"), "must be a finite number of seconds"),
    (True, "must be epoch seconds or an ISO 8601 time"),
    (None, "must be epoch seconds or an ISO 8601 time"),
])
def test_anything_else_is_refused_by_name(value: object, message: str) -> None:
    with pytest.raises(InvalidTime, match=re.escape(message)):
        parse_run_at(value)
