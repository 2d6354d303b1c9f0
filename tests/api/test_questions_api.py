"""Questions over HTTP and the CLI, on every backend: listed by the caller's scope,
answered once, by an identity the caller's token vouches for."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

import runwright as rw

from ..integration.conftest import running_worker
from ..process import apps
from ..process.harness import ROOT, wait_until
from .test_api import as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process


async def test_a_question_is_listed_and_answered_over_http_within_its_tenant(server: str,  # noqa: F811
                                                                              worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "ask_deploy", "args": {"target": "eu"}})).json()
        async with running_worker(worker_app):
            async def listed() -> list:
                return (await http.get("/questions")).json()

            (question,) = await wait_until(listed, "the run's question is listed")
            assert (question["run_id"], question["id"], question["kind"]) == (run["id"], 1, "question")
            assert question["body"]["text"] == "Deploy eu?"
            assert (await http.get("/questions", headers=as_("bob-token"))).json() == []
            other = await http.post(f"/runs/{run['id']}/answers", headers=as_("bob-token"),
                                    json={"question": 1, "value": True})
            assert other.status_code == 404, "another tenant's run is not found, as if it did not exist"
            bad = await http.post(f"/runs/{run['id']}/answers", json={"question": 1, "value": "maybe"})
            assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"
            assert "boolean" in bad.json()["detail"]
            typo = await http.post(f"/runs/{run['id']}/answers", json={"question": 1, "valeu": True})
            assert typo.status_code == 422
            missing = await http.post(f"/runs/{run['id']}/answers", json={"question": 9, "value": True})
            assert missing.status_code == 404
            ok = await http.post(f"/runs/{run['id']}/answers",
                                 json={"question": 1, "value": True, "by": "ana"})
            assert ok.status_code == 200, ok.text
            assert (ok.json()["answer"], ok.json()["answered_by"]) == (True, "alice:ana")
            result = await (await worker_app.get(run["id"])).result(timeout_s=30)
        assert result["approved"] is True
        same = {"question": 1, "value": True, "by": "ana"}
        again = await http.post(f"/runs/{run['id']}/answers", json=same)
        assert again.status_code == 200, "the same answer again is accepted"
        changed = await http.post(f"/runs/{run['id']}/answers", json={"question": 1, "value": False})
        assert changed.status_code == 409 and changed.headers["content-type"] == "application/problem+json"
        history = (await http.get(f"/runs/{run['id']}/questions", params={"answered": "true"})).json()
        assert [(q["id"], q["answer"]) for q in history] == [(1, True)]


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwright", *args, "--url", url], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


async def test_the_cli_lists_and_answers_questions(store_url: str, worker_app: rw.App) -> None:  # noqa: F811
    handle = await worker_app.submit(apps.ask_deploy, target="us")
    async with running_worker(worker_app):
        await wait_until(lambda: worker_app.questions(), "the run asks")
        listed = cli("questions", "--json", url=store_url)
        assert listed.returncode == 0, listed.stderr
        (question,) = json.loads(listed.stdout)
        assert (question["run_id"], question["id"], question["body"]["text"]) == (handle.id, 1, "Deploy us?")
        for bad_args, why in [(["not json"], "not JSON"), (["true", "--approve"], "exactly one"),
                              (['"yes"'], "boolean")]:
            refused = cli("answer", str(handle.id), "1", *bad_args, url=store_url)
            assert refused.returncode == 2, refused
            assert why in refused.stderr and "Traceback" not in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        answered = cli("answer", str(handle.id), "1", "true", "--by", "ops", url=store_url)
        assert answered.returncode == 0, answered.stderr
        # The worker runs in this process, so the run reports this pid.
        assert await handle.result(timeout_s=30) == {"target": "us", "approved": True, "pid": os.getpid()}
    (done,) = await worker_app.questions(handle.id, pending=False)
    assert done.answered_by == "ops"
    twice = cli("answer", str(handle.id), "1", "false", url=store_url)
    assert twice.returncode == 2 and "AlreadyAnswered" in twice.stderr
