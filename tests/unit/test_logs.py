import asyncio
import json
import logging
import re

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


async def test_a_worker_s_start_and_stop_lines_count_the_app_s_tasks_and_give_instants_in_utc(caplog):
    """`worker started` counts the app's own tasks apart from those every App has (the
    built-in jobs, verify's workload), so one task reads `tasks=1`; `worker stopped`
    gives its start as every face writes an instant, not as epoch seconds."""
    app = rw.App("memory://")

    @app.task
    async def only(ctx: rw.Context) -> None:
        return None

    caplog.set_level(logging.INFO, logger="runwright")
    async with app:
        worker = app.worker(poll_s=0.05)
        running = asyncio.create_task(worker.run())
        await (await app.submit(only)).result(timeout_s=30)
        worker.stop()
        await running
    fields = {record.getMessage(): record.rw for record in caplog.records if hasattr(record, "rw")}
    assert fields["worker started"]["tasks"] == 1
    assert fields["worker started"]["built_in_tasks"] == len(app.tasks) - 1 > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fields["worker stopped"]["started_at"])
