"""A reclaimed run over HTTP, on every backend: 410 Gone, distinct from an unknown id."""

from __future__ import annotations

import httpx
import pytest

import runwright as rw
from runwright.store._params import RunReclaimParams

from ..integration.conftest import running_worker
from .test_api import as_, server, worker_app  # noqa: F401 (fixtures)

pytestmark = pytest.mark.process


async def test_a_reclaimed_run_is_gone_and_an_unknown_one_not_found(server: str,  # noqa: F811
                                                                   worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        run = (await http.post("/runs", json={"task": "record", "args": {"n": 1}})).json()
        async with running_worker(worker_app):
            await (await worker_app.get(run["id"])).result(timeout_s=30)
        reclaimed = await worker_app.store.run_reclaim(RunReclaimParams(ended_before=worker_app.now() + 1))
        assert reclaimed.run_ids == [run["id"]]
        for path in (f"/runs/{run['id']}", f"/runs/{run['id']}/events"):
            gone = await http.get(path)
            assert gone.status_code == 410, gone.text
            assert gone.headers["content-type"] == "application/problem+json"
            assert gone.json()["title"] == "Run expired"
        unknown = await http.get(f"/runs/{run['id'] + 10**6}")
        assert unknown.status_code == 404
