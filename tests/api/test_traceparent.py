"""A W3C traceparent given at submission, by each face: the HTTP header on POST /runs,
`runwright submit --traceparent` and the library; a malformed one is refused clearly and
writes nothing. (How workers continue the trace: tests/process/test_traces.py.)"""

from __future__ import annotations

from typing import AsyncIterator

import httpx
import pytest

import runwright as rw
from runwright.store._params import RunCountParams

from ..process import apps
from ..process.harness import APP_SPEC, client
from ..process.test_cli import runwright
from .test_api import TOKENS, as_, serving

pytestmark = pytest.mark.process
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MALFORMED = ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "not-a-traceparent",
             "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
             "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]


@pytest.fixture
async def server(store_url: str, tmp_path) -> AsyncIterator[str]:
    async with serving(store_url, tmp_path, TOKENS) as base:
        yield base


async def _runs(store_url: str) -> int:
    async with client(store_url) as app:
        return sum((await app.store.run_count_by_state(RunCountParams())).values())


@pytest.mark.parametrize("backend", ["sqlite"])  # the face is the same on every backend
async def test_the_traceparent_header_is_stored_and_a_bad_one_is_422(server: str, store_url: str) -> None:
    async with httpx.AsyncClient(base_url=server, headers=as_("alice-token")) as http:
        made = await http.post("/runs", json={"task": "record", "args": {"n": 1}},
                               headers={"traceparent": TRACEPARENT.upper()})
        assert made.status_code == 201, made.text
        for bad in MALFORMED:
            refused = await http.post("/runs", json={"task": "record", "args": {"n": 2}},
                                      headers={"traceparent": bad})
            assert refused.status_code == 422, refused.text
            assert "traceparent" in refused.json()["detail"]
    async with client(store_url) as app:
        assert (await app.store.run_get(made.json()["id"])).traceparent == TRACEPARENT
    assert await _runs(store_url) == 1, "a refused submission writes nothing"


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_runwright_submit_traceparent(store_url: str) -> None:
    async with client(store_url):  # the schema
        pass
    done = runwright("submit", APP_SPEC,
                     "record", "--args", '{"n": 1}', "--traceparent", TRACEPARENT, url=store_url)
    assert done.returncode == 0, done.stderr
    async with client(store_url) as app:
        (run,) = await app.list_runs()
    assert run.traceparent == TRACEPARENT
    refused = runwright("submit", APP_SPEC, "record", "--args", '{"n": 1}',
                        "--traceparent", MALFORMED[0], url=store_url)
    assert refused.returncode == 2 and "traceparent" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert await _runs(store_url) == 1


async def test_the_library_takes_traceparent_as_an_option_not_an_argument(store_url: str) -> None:
    async with client(store_url) as app:
        await _library_submissions(app)


async def _library_submissions(app: rw.App) -> None:
    handle = await app.submit(apps.record, n=3, traceparent=TRACEPARENT)
    assert handle.run.arguments() == {"n": 3} and handle.run.traceparent == TRACEPARENT
    (many,) = await app.submit_many(apps.record, [rw.Call({"n": 4}, traceparent=TRACEPARENT)])
    assert many.run.traceparent == TRACEPARENT
    for bad in MALFORMED:
        with pytest.raises(rw.InvalidInput, match="traceparent"):
            await app.submit(apps.record, n=5, traceparent=bad)
