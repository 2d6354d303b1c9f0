"""POST /runs/{id}/fork over a real `runwright serve`, on every backend: a fork runs only
the steps from the one it forked from (the ledger shows each step's executions), links
both ways, answers a repeated key with the same fork, and refuses a bad step as a 422
problem, another tenant's run as a 404."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..process import apps
from .test_api import as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process


def executions(run_id: int) -> Counter:
    """How many times each ledgered step of the run was executed, in any process."""
    counted: Counter = Counter()
    for log in apps.ledger_dir().glob("[0-9]*.log"):  # a process's ledger, not the server's log
        for line in log.read_text().splitlines():
            event, of_run, *_ = line.split()
            if int(of_run) == run_id:
                counted[event] += 1
    return counted


async def test_a_fork_over_http_runs_from_its_step_and_links_both_ways(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    alice, bob = as_("alice-token"), as_("bob-token")
    async with httpx.AsyncClient(base_url=server, headers=alice, timeout=30) as http:
        async with running_worker(worker_app):
            made = await http.post("/runs", json={"task": "steps_with_ledger", "args": {"steps": 3}})
            original = made.json()
            assert await (await worker_app.get(original["id"])).result(timeout_s=30) == 3
            forked = await http.post(f"/runs/{original['id']}/fork",
                                     json={"from_step": "step-2", "args": {"steps": 4}, "key": "f1"})
            assert forked.status_code == 201, forked.text
            fork = forked.json()
            assert (fork["forked_from"], fork["args"], fork["state"]) == (
                original["id"], {"steps": 4}, "queued")
            # step-0 and step-1 replayed (0 + 1), step-2 and step-3 ran: 0+1+2+3.
            assert await (await worker_app.get(fork["id"])).result(timeout_s=30) == 6
        assert executions(original["id"]) == Counter({"step-0": 1, "step-1": 1, "step-2": 1})
        assert executions(fork["id"]) == Counter({"step-2": 1, "step-3": 1})
        again = await http.post(f"/runs/{original['id']}/fork", json={"from_step": "step-2", "key": "f1",
                                                                     "args": {"steps": 4}})
        assert again.status_code == 200 and again.json()["id"] == fork["id"]
        listed = (await http.get("/runs", params={"forked_from": original["id"]})).json()["items"]
        assert [run["id"] for run in listed] == [fork["id"]]
        steps = (await http.get(f"/runs/{fork['id']}/steps")).json()
        assert [step["name"] for step in steps] == ["step-0", "step-1", "step-2", "step-3"]

        for body, words in (({"from_step": 4}, "from_step=4 is past the end of run"),
                            ({"from_step": "step-9"}, "journaled no step of that name"),
                            ({"from_step": 0, "args": {"steps": "many"}}, "argument 'steps'")):
            refused = await http.post(f"/runs/{original['id']}/fork", json=body)
            assert refused.status_code == 422, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
            assert words in refused.json()["detail"]
        theirs = await http.post(f"/runs/{original['id']}/fork", json={"from_step": 0}, headers=bob)
        assert theirs.status_code == 404
        bobs = await http.get("/runs", params={"forked_from": original["id"]}, headers=bob)
        assert bobs.json()["items"] == []
        after = (await http.get("/runs", params={"forked_from": original["id"]})).json()["items"]
        assert [run["id"] for run in after] == [fork["id"]]  # nothing refused was written
