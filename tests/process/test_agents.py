"""The delivery guarantees of agent tools, with real worker processes, on every backend.

Workers are `runwright worker tests.process.agent_apps:app` subprocesses whose model is a
scripted OpenAI-protocol server in this process (it records every request); their tools
write a ledger (see agent_apps.py), so a test sees every execution, even one whose
process was killed before the store heard of it. Every wait is on a condition, with a
deadline that only stops a broken test from hanging.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

import runwright as rw
from runwright.runs import Run, RunState

from ..agents.scripted_openai import Reply, Script, call, tool_results
from . import agent_apps
from .agent_harness import AgentFleet, ToolCall, stopped
from .harness import WorkerProcess, owner_pid, sqlite_write_lock_free, wait_until

pytestmark = pytest.mark.process

# The zombie's lease: long enough to renew on a loaded machine (at 2 s a suite run saw a
# worker lose its own lease to itself), short enough to wait out.
LEASE_S = 3.0


@pytest.fixture
async def client(app: rw.App) -> AsyncIterator[rw.App]:
    """The process tests' client on a fresh store, knowing the agent by name."""
    app.tasks.update(agent_apps.app.tasks)
    yield app


@pytest.fixture
def agents(store_url: str, tmp_path: Path) -> Iterator[AgentFleet]:
    fleet = AgentFleet(store_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.dump_logs())  # captured by pytest, shown only when the test failed


# -- scripts of the model ---------------------------------------------------------------

def ask_once_then_report(tool: str, arguments: dict[str, Any]) -> Script:
    """The model asks for `tool` once, then answers with the tool results it got (JSON)."""

    def script(body: dict[str, Any], index: int) -> Reply:
        results = tool_results(body)
        if not results:
            return Reply(tool_calls=[call(tool, arguments, "c1")])
        return Reply(content=json.dumps(results))

    return script


def prepare_and_transfer(body: dict[str, Any], index: int) -> Reply:
    """The model asks for `prepare` and `transfer` of the order (the user's message) in
    one turn, so transfer's started mark is the very next write after prepare's journal
    write; then it answers with the results."""
    results = tool_results(body)
    if not results:
        order = user_input(body)
        return Reply(tool_calls=[call("prepare", {"order": order}, "p"),
                                 call("transfer", {"order": order}, "t")])
    return Reply(content=json.dumps(results))


def user_input(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


# -- helpers ----------------------------------------------------------------------------

async def ended(handle: rw.RunHandle) -> Run | None:
    run = await handle.refresh()
    return run if run.done else None


async def kill_the_worker_inside(client: rw.App, agents: AgentFleet, handle: rw.RunHandle,
                                 tool: str) -> tuple[WorkerProcess, Run]:
    """SIGKILL the worker whose run is inside `tool` (its first, held execution); return
    that worker and the run as it stood at the kill."""
    await wait_until(lambda: agents.calls(tool), f"the run is inside {tool}")
    run = await handle.refresh()
    assert run.state is RunState.RUNNING
    victim = agents.by_pid(await owner_pid(client, run))
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    return victim, run


async def taken_over_and_succeeded(handle: rw.RunHandle, at_kill: Run) -> Run:
    """Wait for the run's end; check that it ended well, after a takeover. On a loaded
    machine a survivor whose loop stalls past its liveness is taken for dead too, and the
    run is taken over again: more than one takeover is allowed, what each tool promises
    is checked by the caller whatever their number."""
    run = await wait_until(lambda: ended(handle), "the run is taken over and ends")
    assert run.state is RunState.SUCCEEDED, f"the run ended {run.state.value}: {run.error}"
    assert run.recoveries >= 1 and run.fence > at_kill.fence, "taken over, under a new claim"
    return run


async def journal(client: rw.App, run_id: int) -> list[tuple[str, int]]:
    """(name, fence) of each journaled step, in order."""
    return [(s.name, s.fence) for s in await client.store.step_list(run_id)]


def survivor_of(agents: AgentFleet, victim: WorkerProcess) -> WorkerProcess:
    (survivor,) = [w for w in agents.workers if w is not victim]
    return survivor


# -- a. at most once --------------------------------------------------------------------

async def test_sigkill_inside_an_at_most_once_tool_never_calls_it_again(
        client: rw.App, agents: AgentFleet) -> None:
    """SIGKILL the worker inside an at-most-once tool: the other worker takes the run over,
    does not call the tool again, and tells the model its outcome is unknown."""
    model = agents.serve_model(ask_once_then_report("pay", {"amount": 5}))
    agents.start()
    agents.start()
    handle = await client.submit("assistant", input="pay 5")
    victim, at_kill = await kill_the_worker_inside(client, agents, handle, "pay")

    run = await taken_over_and_succeeded(handle, at_kill)
    assert [c.pid for c in agents.calls("pay")] == [victim.pid], "pay executed once, never again"
    # The first model call was journaled before the kill, so only the later ones are new;
    # a model call is at least once: a takeover during the last one makes it again.
    first, *_, last = model.requests
    outcome = json.loads(tool_results(last)["c1"])
    assert outcome["error"] == "ToolOutcomeUnknown", outcome
    assert json.loads(run.value()) == tool_results(last)
    (model_1, model_fence), (pay, pay_fence), (model_2, last_fence) = await journal(client, run.id)
    assert (model_1, pay, model_2) == ("model", "tool:pay", "model")
    assert model_fence == at_kill.fence < pay_fence <= last_fence == run.fence
    (pay_step,) = [s for s in await client.store.step_list(run.id) if s.name == "tool:pay"]
    assert pay_step.status == "failed" and json.loads(pay_step.error)["type"] == "OutcomeUnknown"


# -- b. at least once -------------------------------------------------------------------

async def test_sigkill_inside_an_at_least_once_tool_calls_it_again(
        client: rw.App, agents: AgentFleet) -> None:
    """SIGKILL the worker inside an at-least-once tool: the takeover calls it again, under
    the new claim, and the model gets its real result."""
    model = agents.serve_model(ask_once_then_report("fetch", {"url": "https://example.com"}))
    agents.start()
    agents.start()
    handle = await client.submit("assistant", input="read it")
    victim, at_kill = await kill_the_worker_inside(client, agents, handle, "fetch")
    survivor = survivor_of(agents, victim)

    run = await taken_over_and_succeeded(handle, at_kill)
    # Again after the kill: once in the killed worker, once more (at least) by the
    # survivor, which journaled it under its own claim (a higher fence).
    callers = [c.pid for c in agents.calls("fetch")]
    assert callers.count(victim.pid) == 1 and survivor.pid in callers
    assert set(callers) == {victim.pid, survivor.pid}
    (model_1, model_fence), (fetch, fetch_fence), (model_2, last_fence) = await journal(client, run.id)
    assert (model_1, fetch, model_2) == ("model", "tool:fetch", "model")
    assert model_fence == at_kill.fence < fetch_fence <= last_fence == run.fence
    first, *_, last = model.requests  # the last model call is at least once, as every step
    assert tool_results(last) == {"c1": "fetched https://example.com"}
    assert json.loads(run.value()) == {"c1": "fetched https://example.com"}


# -- c. idempotent ----------------------------------------------------------------------

async def test_sigkill_inside_an_idempotent_tool_calls_it_again_with_the_same_key(
        client: rw.App, agents: AgentFleet) -> None:
    """SIGKILL the worker inside an idempotent tool: it runs again after the takeover and
    gets the same idempotency key both times, `run_id:position`."""
    model = agents.serve_model(ask_once_then_report("charge", {"amount": 7}))
    agents.start()
    agents.start()
    handle = await client.submit("assistant", input="charge 7")
    victim, at_kill = await kill_the_worker_inside(client, agents, handle, "charge")
    survivor = survivor_of(agents, victim)

    run = await taken_over_and_succeeded(handle, at_kill)
    charges = agents.calls("charge")
    callers = [c.pid for c in charges]
    assert callers.count(victim.pid) == 1 and survivor.pid in callers
    assert set(callers) == {victim.pid, survivor.pid}
    (charge_step,) = [s for s in await client.store.step_list(run.id) if s.name == "tool:charge"]
    assert charge_step.position == 1  # after the first model call
    assert [c.detail for c in charges] == [f"{run.id}:1"] * len(charges), "the same key every time"
    first, *_, last = model.requests  # the last model call is at least once, as every step
    assert tool_results(last) == {"c1": "charged 7"}


# -- d. a zombie and an at-most-once tool -----------------------------------------------

async def test_a_zombie_cannot_start_an_at_most_once_tool_after_its_lease_was_taken(
        client: rw.App, agents: AgentFleet, store_url: str) -> None:
    """The worker stops itself (SIGSTOP, by a crash point) right after journaling
    `prepare`, before writing the started mark of the at-most-once `transfer` that comes
    next. Past its lease, another worker takes the run over, transfers and finishes it.
    Resumed, the zombie goes straight on to transfer: its started mark is refused by the
    fence (or, should its lease checks see the new fence first, it is stopped before
    that), so it never makes the call, and it logs the lost lease.

    The stall comes from a crash point rather than a SIGSTOP while inside a blocking tool
    before transfer: a zombie resumed there would be refused at that tool's own journal
    write and never reach transfer's started mark, the write this test is about."""
    model = agents.serve_model(prepare_and_transfer)
    zombie = agents.start(lease_s=LEASE_S, crash_points="step.after_journal:tool:prepare=stop")
    handle, order = await run_until_the_zombie_stalls(client, agents, zombie, store_url)
    stalled = await handle.refresh()
    assert stalled.state is RunState.RUNNING and await owner_pid(client, stalled) == zombie.pid

    other = agents.start()  # the default lease: the taker keeps what it takes
    run = await taken_over_and_succeeded(handle, stalled)
    assert [c.pid for c in calls_for(agents, "transfer", order)] == [other.pid]

    zombie.signal(signal.SIGCONT)  # it goes on from the crash point: to transfer
    await wait_until(lambda: logged_lost_lease(zombie, handle.id), "the zombie logs its lost lease")
    # On its way out a worker flushes every write it still had pending: after this, the
    # store holds all the zombie will ever write.
    assert await zombie.stop() == 0, "exit code of the zombie after SIGTERM"

    assert await handle.refresh() == run, "a write of the zombie became durable"
    assert [c.pid for c in calls_for(agents, "transfer", order)] == [other.pid], \
        "transfer executed once, by the new owner: the zombie never made the call"
    # prepare was journaled before the stall: the new owner replayed it, not called it.
    assert [c.pid for c in calls_for(agents, "prepare", order)] == [zombie.pid]
    # The first model call by the zombie, under the claim it stalled in or (had it lost its
    # lease to itself on a loaded machine, and claimed the run again) an earlier one.
    (model_1, model_fence), *rest = await journal(client, run.id)
    assert model_1 == "model" and model_fence <= stalled.fence
    assert rest == [("tool:prepare", stalled.fence), ("tool:transfer", run.fence), ("model", run.fence)]
    assert len([r for r in model.requests if user_input(r) == order]) == 2, "no model call paid twice"
    assert json.loads(run.value()) == {"p": f"prepared {order}", "t": f"transferred {order}"}


async def run_until_the_zombie_stalls(client: rw.App, agents: AgentFleet, zombie: WorkerProcess,
                                      store_url: str) -> tuple[rw.RunHandle, str]:
    """Submit a run (the zombie is the only worker) and wait until the zombie has stopped
    at its crash point; return the run and its order.

    On SQLite the stop may catch the zombie's store thread inside a write transaction of
    its own (a heartbeat, a sweep): it then holds the database's single write lock, and no
    other worker could take over. That is a limit of SQLite, not what this test is about:
    let the zombie finish that run and try another."""
    for attempt in range(1, 4):
        order = f"order-{attempt}"
        handle = await client.submit("assistant", input=order)
        await wait_until(lambda: stopped(zombie.pid), "the zombie stops right after journaling prepare")
        if not store_url.startswith("sqlite:") or sqlite_write_lock_free(store_url):
            return handle, order
        zombie.signal(signal.SIGCONT)
        await wait_until(lambda: ended(handle), f"{order} ends on the resumed worker")
    raise AssertionError("the zombie stopped inside a write transaction 3 times in a row")


def calls_for(agents: AgentFleet, tool: str, order: str) -> list[ToolCall]:
    """Executions of `tool` for this order (the runs a stall retry left behind have others)."""
    return [c for c in agents.calls(tool) if c.detail == order]


def logged_lost_lease(worker: WorkerProcess, run_id: int) -> bool:
    """The worker logged that it lost run `run_id`: a refused journal write ("run N: lease
    lost (fence F superseded); run abandoned ...") or its lease checks ("lease lost: run
    abandoned ..."), whichever saw it first."""
    return any("lease lost" in line and f"run_id={run_id} " in f"{line} "
               for line in worker.log().splitlines())
