"""A model's rate limit holds across worker processes: the buckets are in the store.

Two `runwright worker` processes run a chain that fans out 12 llm steps on a model limited
to a request a second with a burst of 1; the scripted model server counts when each
request arrives. Without the limit all 12 arrive within a fraction of a second."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.store._params import EventListParams

from ..agents.scripted_openai import Reply
from . import agent_apps
from .agent_harness import AgentFleet

pytestmark = pytest.mark.process

STEPS = 12
RATE_PER_S, BURST = 1.0, 1
# A request granted at t may reach the server later than one granted after it: a
# process's first call loads the SDK and connects (~0.5 s), and the machine is loaded.
# So a window of w seconds of arrivals holds what w + ARRIVAL_JITTER_S of grants may.
ARRIVAL_JITTER_S = 1.0


@pytest.fixture
async def client(app: rw.App) -> AsyncIterator[rw.App]:
    app.tasks.update(agent_apps.app.tasks)
    yield app


@pytest.fixture
def agents(store_url: str, tmp_path: Path) -> Iterator[AgentFleet]:
    fleet = AgentFleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.dump_logs())


def most_in_a_window(times: list[float], window_s: float) -> int:
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t <= start + window_s) for i, start in enumerate(times))


# Two workers and the agents' clients (the most measured: 26).
@pytest.mark.pg_connections(34)
async def test_two_workers_keep_a_models_rate_limit_and_park_while_they_wait(client, agents):
    server = agents.serve_model(lambda body, index: Reply(content="ok", usage=(3, 1)))
    agents.start()
    agents.start()
    steps = [{"id": f"s{i}", "task": "llm", "args": {"model": agent_apps.LIMITED, "prompt": f"say {i}"}}
             for i in range(STEPS)]
    chain = await client.submit("chain", steps=steps)
    outputs = await chain.result(timeout_s=120)
    assert {step["output"] for step in outputs.values()} == {"ok"}

    # Each step's call at least once (a takeover on a loaded machine may make one twice,
    # through the bucket too).
    assert len(server.received_at) >= STEPS
    for window_s in (1.0, 2.0, 4.0, 8.0):
        allowed = BURST + RATE_PER_S * (window_s + ARRIVAL_JITTER_S)
        assert most_in_a_window(server.received_at, window_s) <= allowed, (window_s, server.received_at)
    children = [r for r in await client.list_runs(limit=100) if r.parent_id == chain.id]
    logs = [await client.store.event_list(EventListParams(r.id)) for r in children]
    workers = {e.data["worker"] for log in logs for e in log if e.kind == "started"}
    assert len(workers) >= 2  # both processes made calls
    parked = [e for log in logs for e in log if e.kind == "parked"]
    assert parked and {e.data["reason"] for e in parked} == {f"rate limit of {agent_apps.LIMITED}"}
