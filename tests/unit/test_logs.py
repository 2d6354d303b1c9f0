import json
import logging

import pytest

import runwright as rw
from runwright.engine import _crashpoints as crashpoints
from runwright.observe import _logs as logs


def test_json_lines_carry_run_attempt_and_worker(monkeypatch, capsys):
    monkeypatch.setenv("RUNWRIGHT_LOG_FORMAT", "json")
    logs.configure_logging("DEBUG")
    try:
        logs.event(logging.INFO, "run started", run_id=7, attempt=2, worker=3)
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    finally:
        logging.getLogger("runwright").handlers.clear()
        logging.getLogger("runwright").propagate = True
    assert line["msg"] == "run started" and line["level"] == "info"
    assert (line["run_id"], line["attempt"], line["worker"]) == (7, 2, 3)


def test_crash_points_are_off_until_armed():
    crashpoints.crash_point("x")  # not armed: nothing happens
    crashpoints.arm("x")
    try:
        with pytest.raises(crashpoints.CrashPointReached, match="'x'"):
            crashpoints.crash_point("x")
    finally:
        crashpoints.disarm()
    crashpoints.crash_point("x")
    with pytest.raises(rw.InvalidInput, match="must be one of"):
        crashpoints.arm("x", "explode")


def test_crash_points_can_target_one_step_and_fire_a_set_number_of_times():
    crashpoints.arm("step.after_side_effect:charge", times=2)
    try:
        crashpoints.crash_point("step.after_side_effect", "other")  # another step: nothing
        for _ in range(2):
            with pytest.raises(crashpoints.CrashPointReached):
                crashpoints.crash_point("step.after_side_effect", "charge")
        crashpoints.crash_point("step.after_side_effect", "charge")  # spent: nothing
    finally:
        crashpoints.disarm()
