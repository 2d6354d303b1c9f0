"""The run state machine as a property, through each face: every operation (a manual
retry, a cancel, an answer, an interrupt by a newer run on the thread, a reclaim by
retention) applied to a run in every state gives the documented transition, or the
documented refusal (an error, a 4xx problem, an exit code) and then nothing changed: not
the run, not its journal, not its log.

The states are built through the store as the engine builds them (a claim, a question
asked, a park, a fenced end), on a queue of their own that no worker serves, so nothing
moves them but the operation under test; `running` is a real worker process holding a
real run. One worker, and for HTTP one server, per face and backend."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import uuid
from typing import Any

import httpx
import pytest

import runwright as rw
from runwright.engine._sweeper import Retention, Sweeper
from runwright.runs import RETRYABLE_STATES, Run, RunState
from runwright.store._params import (
    EventListParams,
    QuestionOpenParams,
    RunCancelParams,
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
    WorkerRegisterParams,
)

from ..conftest import BACKENDS
from . import apps
from .harness import APP_SPEC, ROOT, start_server, wait_until

pytestmark = pytest.mark.process

OPERATOR = "state-machine-operator"
OPS = ("retry", "cancel", "answer", "interrupt")
ENDED = (RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD, RunState.CANCELLED, RunState.INTERRUPTED)
SHIP_IT = json.dumps({"text": "Ship it?", "schema": {"type": "boolean"}})
# A refusal as each face gives it: the library's error, HTTP's status, the CLI's exit code.
REFUSALS = {"RunNotRetryable": (409, 2), "RunEnded": (409, 2), "QuestionNotFound": (404, 5)}
GONE = {"RunExpired": (410, 5)}


def expected_refusal(op: str, state: RunState) -> str | None:
    """The documented refusal of `op` on a run in `state` (None: it is applied)."""
    if op == "retry":
        return None if state in RETRYABLE_STATES else "RunNotRetryable"
    if op == "cancel":
        return "RunEnded" if state in ENDED else None
    if op == "answer":  # a running run asks nothing (asking parks it)
        return "QuestionNotFound" if state is RunState.RUNNING else "RunEnded" if state in ENDED else None
    return None  # an interrupt is a submission: it never refuses, it acts on open runs only


# -- building runs in each state ------------------------------------------------------


class Board:
    """Runs of a task no worker has, each on a queue of its own, put in a state as the
    engine puts them there; `running` ones are real runs held by a real worker."""

    def __init__(self, app: rw.App, fleet, face: str) -> None:
        self.app, self.fleet, self.face = app, fleet, face
        self.held: list[int] = []

    async def run(self, state: RunState, *, thread: bool = False, ask: bool = False) -> int:
        name = f"{self.face}-{uuid.uuid4().hex[:8]}"
        if state is RunState.RUNNING:
            handle = await self.app.submit(apps.hold, tag=self.face, thread=name if thread else None)
            self.held.append(handle.id)
            return handle.id
        store = self.app.store
        params = RunInsertParams(key=name, task="ghost", args="{}", queue=name,
                                 thread=name if thread else None, on_busy="enqueue")
        run = (await store.run_insert_threaded(params) if thread
               else (await store.run_insert_many([params]))[0])
        if state is RunState.QUEUED and not ask:
            return run.id
        wid = await store.worker_register(WorkerRegisterParams("board", os.getpid(), [name], ["ghost"]))
        claimed = await store.run_claim(RunClaimParams(wid, (name,), ("ghost",), 1, 60.0))
        # Seen empty on CI: this process's reading of the server's clock was ahead, and the
        # run just queued not yet due (tests/integration/test_store_clock.py). Say what the
        # store held, so that any next time explains itself.
        assert len(claimed) == 1, (claimed, await store.run_get(run.id), await store.worker_list())
        (run,) = claimed
        if ask:
            assert await store.question_open(QuestionOpenParams(run.id, run.fence, 0, "question", SHIP_IT))
        if state in (RunState.QUEUED, RunState.CANCELLED):  # a queued run waits: parked
            await self._finish(run, RunState.QUEUED, release=True, run_at=self.app.now() + 3600,
                               event_kind="parked", event_data='{"reason": "answer"}')
            if state is RunState.CANCELLED:
                await store.run_cancel(RunCancelParams(run.id))
        else:
            await self._finish(run, state, result="1", error='{"type": "E", "message": "e"}')
        await store.worker_deregister(wid)
        return run.id

    async def _finish(self, run: Run, state: RunState, **fields: Any) -> None:
        finish = RunFinishParams(run.id, run.fence, state, **fields)
        assert await self.app.store.run_finish_many([finish]) == []

    async def running(self) -> None:
        """Until every held run is running in the worker."""
        async def all_running() -> bool:
            runs = await self.app.store.run_get_many(self.held)
            return all(r.state is RunState.RUNNING for r in runs) and len(runs) == len(self.held)
        await wait_until(all_running, "the worker holds every running run")


async def seen(app: rw.App, run_id: int) -> tuple[Any, ...]:
    """All an operation could change. A lease renewal of a running run is its worker's
    heartbeat, not a change of the run."""
    run = await app.store.run_get(run_id)
    assert run is not None
    return (dataclasses.replace(run, lease_expires_at=None), await app.store.step_list(run_id),
            await app.store.event_list(EventListParams(run_id, 0, 10_000)),
            await app.questions(run_id, pending=False))


# -- the faces --------------------------------------------------------------------------


class Library:
    def __init__(self, app: rw.App) -> None:
        self.app = app

    async def apply(self, op: str, run_id: int, thread: str | None) -> str | None:
        try:
            if op == "retry":
                await self.app.retry(run_id)
            elif op == "cancel":
                await self.app.cancel(run_id)
            elif op == "answer":
                await self.app.answer(run_id, 0, True, by="ana")
            else:
                await self.app.submit(apps.record, n=1, thread=thread, on_busy="interrupt")
        except rw.RunwrightError as exc:
            return type(exc).__name__
        return None

    async def reclaim(self) -> None:
        retention = Retention(max_age_s=0.001)
        await Sweeper(self.app.store, self.app.runtime.clock, retention, holder="test", lease_s=60).sweep()

    async def read(self, run_id: int) -> str | None:
        try:
            await self.app.get(run_id)
        except rw.RunNotFound as exc:
            return type(exc).__name__
        return None


class Http:
    def __init__(self, http: httpx.AsyncClient, library: Library) -> None:
        self.http, self.library = http, library

    async def apply(self, op: str, run_id: int, thread: str | None) -> int:
        if op == "answer":
            answer = await self.http.post(f"/runs/{run_id}/answers", json={"question": 0, "value": True})
        elif op == "interrupt":
            answer = await self.http.post("/runs", json={"task": "record", "args": {"n": 1}, "thread": thread,
                                                         "on_busy": "interrupt"})
        else:
            answer = await self.http.post(f"/runs/{run_id}/{op}")
        if answer.status_code >= 400:
            assert answer.headers["content-type"] == "application/problem+json", answer.text
        return answer.status_code

    async def reclaim(self) -> None:
        await self.library.reclaim()  # retention has no HTTP route: its effect is read there

    async def read(self, run_id: int) -> int:
        return (await self.http.get(f"/runs/{run_id}")).status_code


class Cli:
    def __init__(self, url: str) -> None:
        self.url = url
        self.gate = asyncio.Semaphore(4)

    async def command(self, *args: str) -> tuple[int, str]:
        env = {**os.environ, "RUNWRIGHT_URL": self.url, "COLUMNS": "200"}
        async with self.gate:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "runwright", *args, cwd=ROOT, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert "Traceback" not in err.decode(), err.decode()
        return proc.returncode or 0, out.decode() + err.decode()

    async def apply(self, op: str, run_id: int, thread: str | None) -> tuple[int, str]:
        if op == "answer":
            return await self.command("answer", str(run_id), "0", "true", "--by", "ana")
        if op == "interrupt":
            spec = {"task": "record", "args": {"n": 1}, "thread": thread, "on_busy": "interrupt"}
            return await self.command("submit", APP_SPEC, "--json", json.dumps(spec))
        return await self.command(op, str(run_id))

    async def reclaim(self) -> None:
        code, said = await self.command("sweep", "--max-age-s", "0.001")
        assert code == 0, said

    async def read(self, run_id: int) -> tuple[int, str]:
        return await self.command("show", str(run_id))


def refused_as(face: str, got: Any, refusal: str | None, table: dict[str, tuple[int, int]]) -> bool:
    """Whether a face's answer is `refusal` (None: a success) as that face says it."""
    if face == "library":
        return bool(got == refusal)
    if face == "http":
        return bool(got < 400 if refusal is None else got == table[refusal][0])
    code, said = got
    return code == 0 if refusal is None else code == table[refusal][1] and refusal in said


# -- the property -----------------------------------------------------------------------


def moved(op: str, state: RunState, before: tuple[Any, ...], after: tuple[Any, ...]) -> None:
    """The documented transition of `op` applied to a run that was in `state`."""
    run, was = after[0], before[0]
    kinds = [e.kind for e in after[2][len(before[2]):]]
    if op == "retry":
        assert run.state is RunState.QUEUED and kinds == ["retried"], (run, kinds)
        assert after[2][-1].data["previous"] == state.value
    elif op == "cancel" and state is RunState.QUEUED:
        assert run.state is RunState.CANCELLED and kinds == ["cancelled"], (run, kinds)
    elif op == "cancel":  # running: its worker stops it
        assert run.cancel_requested and kinds[:1] == ["cancel_requested"], (run, kinds)
    elif op == "answer":  # the parked run is woken with its answer
        assert run.state is RunState.QUEUED and run.run_at < was.run_at, run
        assert kinds == ["answered"], kinds
        assert after[3][0].answered and after[3][0].answer is True
    elif state is RunState.RUNNING:  # interrupt: it stops at its next step boundary
        assert run.state is RunState.RUNNING and run.interrupt == "interrupt", run
        assert kinds == ["interrupt_requested"], kinds
    elif state is RunState.QUEUED:
        # Interrupt of a thread whose only open run waits: the newer run goes ahead of it,
        # and the waiting run keeps waiting, untouched, to run after it (it is not ended).
        assert after == before, (run, kinds)
    else:  # an ended run is not its thread's open run: the newer one just runs
        assert after == before


# The CLI is a process per command (most of its test's time): it turns the same App's
# errors into exit codes on every backend, so it runs on one; the library and HTTP on all.
CASES = [(backend, face) for backend in BACKENDS for face in ("library", "http")] + [("sqlite", "cli")]


# Workers, a server and the CLI's processes on one store (the most measured: 33).
@pytest.mark.pg_connections(40)
@pytest.mark.parametrize(("backend", "face"), CASES, indirect=["backend"])
async def test_every_operation_in_every_state_is_a_transition_or_a_refusal_that_changes_nothing(
        app: rw.App, fleet, store_url: str, face: str) -> None:
    worker = fleet.start(concurrency=20)
    board = Board(app, fleet, face)
    library = Library(app)
    server = None
    cases: dict[tuple[str, RunState], tuple[int, str | None]] = {}
    for op in OPS:
        for state in RunState:
            thread = op == "interrupt"
            asks = op == "answer" and state is not RunState.RUNNING
            run_id = await board.run(state, thread=thread, ask=asks)
            cases[op, state] = (run_id, None)
    threads = {key: (await app.store.run_get(run_id)).thread for key, (run_id, _) in cases.items()}
    gone = {state: await board.run(state) for state in RunState}
    await worker.wait_started()
    await board.running()
    try:
        if face == "http":
            server = start_server(store_url, fleet.logs, APP_SPEC, {"RUNWRIGHT_OPERATOR_TOKENS": OPERATOR,
                                                                     apps.LEDGER_ENV: str(fleet.ledger)})
            base = await server.wait_listening()
        http = httpx.AsyncClient(base_url=base if server else "http://unused",
                                 headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=60)
        faces: dict[str, Library | Cli | Http] = {"library": library, "cli": Cli(store_url),
                                                  "http": Http(http, library)}
        use = faces[face]

        async def check(op: str, state: RunState) -> None:
            run_id = cases[op, state][0]
            before = await seen(app, run_id)
            got = await use.apply(op, run_id, threads[op, state])
            refusal = expected_refusal(op, state)
            where = (face, op, state.value, got)
            assert refused_as(face, got, refusal, REFUSALS), where
            after = await seen(app, run_id)
            if refusal is not None:
                assert after == before, where
            else:
                moved(op, state, before, after)

        await asyncio.gather(*(check(op, state) for op in OPS for state in RunState))
        # A cancelled running run is ended by its worker, as cancelled.
        stopped = cases["cancel", RunState.RUNNING][0]
        await wait_until(lambda: _state_is(app, stopped, RunState.CANCELLED), "the worker ends it cancelled")

        # Reclaim: every ended run goes (a reader is told it expired); a live one stays as it was.
        live = {state: await seen(app, gone[state]) for state in (RunState.QUEUED, RunState.RUNNING)}
        await use.reclaim()
        for state, run_id in gone.items():
            got = await use.read(run_id)
            if state in ENDED:
                assert refused_as(face, got, "RunExpired", GONE), (face, state.value, got)
            else:
                assert refused_as(face, got, None, GONE) and await seen(app, run_id) == live[state]
        await http.aclose()
    finally:
        fleet.release(face)
        if server is not None:
            server.kill()
    assert await worker.stop() == 0


async def _state_is(app: rw.App, run_id: int, state: RunState) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.state is state

