"""Cron schedules over HTTP: created, redefined, listed, paused, resumed and deleted by the
operator (a tenant's token gets 403), checked as the library checks them; on every backend."""

from __future__ import annotations

import httpx
import pytest

import runwright as rw
from runwright.store._params import RunListParams

from ..integration.conftest import running_worker
from ..process.harness import wait_until
from .test_api import OPERATOR_TOKEN, as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process
OPERATOR = as_(OPERATOR_TOKEN)


async def test_the_operator_manages_schedules_over_http(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=OPERATOR) as http:
        every_second = {"name": "tick", "cron": "* * * * * *", "task": "record", "args": {"n": 5}}
        created = await http.post("/schedules", json=every_second)
        assert created.status_code == 201, created.text
        assert created.json()["name"] == "tick" and created.json()["paused"] is False
        async with running_worker(worker_app):  # it is a real schedule: a worker fires it
            fired = await wait_until(lambda: _fired(worker_app, "tick"), "the schedule fired")
        assert fired.key.startswith("schedule:tick:") and fired.arguments() == {"n": 5}
        hourly = {**every_second, "cron": "0 * * * *", "tz": "Europe/Paris", "priority": 0}
        redefined = await http.post("/schedules", json=hourly)
        assert redefined.status_code == 200 and redefined.json()["cron"] == "0 * * * *"
        (listed,) = (await http.get("/schedules")).json()
        assert (listed["tz"], listed["priority"], listed["next_fire_at"] > 0) == ("Europe/Paris", 0, True)
        assert (await http.post("/schedules/tick/pause")).status_code == 204
        assert (await http.get("/schedules")).json()[0]["paused"] is True
        assert (await http.post("/schedules/tick/resume")).status_code == 204
        assert (await http.delete("/schedules/tick")).status_code == 204
        assert (await http.get("/schedules")).json() == []
        gone = await http.delete("/schedules/tick")
        assert gone.status_code == 404 and gone.headers["content-type"] == "application/problem+json"


async def test_bad_schedules_are_refused_naming_what_is_wrong(server: str, worker_app: rw.App) -> None:  # noqa: F811
    base = {"name": "s", "cron": "0 9 * * *", "task": "record", "args": {"n": 1}}
    async with httpx.AsyncClient(base_url=server, headers=OPERATOR) as http:
        for change, status, words in [
            ({"cron": "every day"}, 422, "cron"),
            ({"tz": "Mars/Olympus"}, 422, "Mars/Olympus"),
            ({"task": "nope"}, 422, "unknown task 'nope'"),
            ({"args": {"m": 1}}, 422, "record"),
            ({"name": "a:b"}, 422, "name"),
            ({"misfire": "later"}, 422, "misfire"),
            ({"every": "day"}, 422, "every"),
        ]:
            answer = await http.post("/schedules", json={**base, **change})
            assert answer.status_code == status, (change, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert words in answer.json()["detail"], (change, answer.json())
        for method, path in [("POST", "/schedules"), ("DELETE", "/schedules/s"), ("GET", "/schedules"),
                             ("POST", "/schedules/s/pause"), ("POST", "/schedules/s/resume")]:
            refused = await http.request(method, path, headers=as_("alice-token"), json=base)
            assert refused.status_code == 403, (method, path, refused.text)
        assert (await http.get("/schedules")).json() == []


async def _fired(app: rw.App, name: str) -> rw.Run | None:
    runs = await app.store.run_list(RunListParams(limit=10))
    return next((r for r in runs if r.key.startswith(f"schedule:{name}:")), None)
