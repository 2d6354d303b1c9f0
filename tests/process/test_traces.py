"""One trace per run across worker processes, exported over OTLP/HTTP to a real receiver.

Workers run with the standard OTEL_* variables pointing at `OtlpReceiver` (http/protobuf
on loopback). A run whose first worker is SIGKILLed mid-run and which another worker
finishes is one trace: the spans of both claims, under the one root span that every
machine names alike. A submitted traceparent's trace is the one used, and a child run's
spans sit under the parent's step that submitted it. No argument value reaches an
attribute, nor any message content of an agent's model and tool calls. Every wait is on a
condition (the ledger, the receiver, the store).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from typing import Iterator

import httpx
import pytest

import runwright as rw
from runwright.core._journal import Event
from runwright.observe._trace_context import RunTrace
from runwright.runs import Run, RunState

from ..api.test_api import OPERATOR_TOKEN, as_, serving
from ..otlp_receiver import OtlpReceiver, ReceivedSpan
from . import agent_apps, trace_apps
from .agent_harness import APP_SPEC as AGENT_APP
from .agent_harness import AgentFleet
from .harness import ROOT, WorkerFleet, wait_until
from .test_agents import ask_once_then_report

pytestmark = pytest.mark.process

TRACE_APP = "tests.process.trace_apps:app"
SECRET = "s3cr3t-argument-value"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
def traced_app(app: rw.App) -> rw.App:
    app.tasks.update(trace_apps.app.tasks)
    return app


def _of_run(receiver: OtlpReceiver, run_id: int) -> list[ReceivedSpan]:
    return [s for s in receiver.received() if s.attributes.get("runwright.run.id") == run_id]


def _named(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (found,) = [s for s in spans if s.name == name]
    return found


def _hex(span_id: int) -> str:
    return f"{span_id:016x}"


async def _ended(app: rw.App, run_id: int) -> Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None


def _assert_no_argument_values(spans: list[ReceivedSpan]) -> None:
    for span in spans:
        for name, value in span.attributes.items():
            assert SECRET not in str(value), f"span {span.name!r}: attribute {name} holds an argument"
        assert SECRET not in span.name


async def test_a_run_is_one_trace_across_a_sigkill_takeover(
        traced_app: rw.App, fleet: WorkerFleet, receiver: OtlpReceiver) -> None:
    first = fleet.start(env=receiver.env(), app_spec=TRACE_APP)
    handle = await traced_app.submit(trace_apps.traced_steps, secret=SECRET, steps=3, gate=1)
    # Step 0 is done and exported; step 1 waits at its gate: kill the worker there.
    await wait_until(lambda: ("gate-1", handle.id, 1, first.pid) in fleet.ledger_lines(),
                     "the first worker reaches step 1's gate")
    await wait_until(lambda: any(s.name == "step-0" for s in _of_run(receiver, handle.id)),
                     "step 0's span is exported")
    first.kill()
    fleet.open_gate(handle.id, 1)
    fleet.start(env=receiver.env(), app_spec=TRACE_APP)
    run = await wait_until(lambda: _ended(traced_app, handle.id), "the run ends on the second worker")
    assert (run.state, run.fence, run.recoveries) == (RunState.SUCCEEDED, 2, 1), "one takeover"
    spans = await wait_until(
        lambda: (found := _of_run(receiver, handle.id)) and any(s.name.startswith("run ") for s in found)
        and found, "the run's own span is exported")

    trace = RunTrace.of(run)  # no traceparent given: the run's own trace, derived
    assert {s.trace_id for s in spans} == {f"{trace.trace_id:032x}"}, "one trace id for both claims"
    root = _named(spans, "run traced_steps")
    assert (root.span_id, root.parent_span_id) == (_hex(trace.root_span_id), ""), "a root of its own"
    step_fences = {s.name: s.attributes["runwright.fence"] for s in spans if s.name.startswith("step-")}
    assert step_fences == {"step-0": 1, "step-1": 2, "step-2": 2}, "spans of both claims"
    for span in spans:
        if span.name.startswith("step-"):
            fence, position = span.attributes["runwright.fence"], span.attributes["runwright.step.position"]
            assert span.span_id == _hex(trace.step_span_id(fence, position))
            assert span.parent_span_id == _hex(trace.attempt_span_id(fence)), f"{span.name} under its claim"
    attempts = {s.attributes["runwright.fence"]: s for s in spans if s.name == "attempt traced_steps"}
    assert sorted(attempts) == [1, 2], "the killed claim's span (ended by its rescuer) and the recovery's"
    for fence, attempt in attempts.items():
        assert attempt.span_id == _hex(trace.attempt_span_id(fence))
        assert attempt.parent_span_id == root.span_id, "both attempts under the same root"
    assert attempts[1].attributes["runwright.outcome"] == "worker_lost"
    assert attempts[2].attributes["runwright.outcome"] == "succeeded"
    _assert_no_argument_values(spans)


async def test_a_step_done_just_before_a_sigkill_keeps_its_span_and_attempts_their_number(
        traced_app: rw.App, fleet: WorkerFleet, receiver: OtlpReceiver) -> None:
    """The first worker would export its spans only after ten minutes: step 0 completes
    and the worker is SIGKILLed with step 0's span still in its buffer. The worker that
    takes the run over emits that span from the journal (same ids), and every span of the
    run names attempt 1: the lost claim's, the takeover's and the steps'."""
    first = fleet.start(env=receiver.env(delay_ms=600_000), app_spec=TRACE_APP)
    handle = await traced_app.submit(trace_apps.traced_steps, secret=SECRET, steps=3, gate=1)
    await wait_until(lambda: ("gate-1", handle.id, 1, first.pid) in fleet.ledger_lines(),
                     "step 0 is journaled and step 1 waits at its gate")
    first.kill()
    assert _of_run(receiver, handle.id) == [], "nothing was exported before the kill"
    fleet.open_gate(handle.id, 1)
    fleet.start(env=receiver.env(), app_spec=TRACE_APP)
    run = await wait_until(lambda: _ended(traced_app, handle.id), "the run ends on the second worker")
    assert (run.state, run.fence, run.recoveries, run.attempt) == (RunState.SUCCEEDED, 2, 1, 1)
    spans = await wait_until(
        lambda: (found := _of_run(receiver, handle.id)) and any(s.name.startswith("run ") for s in found)
        and found, "the run's own span is exported")

    trace = RunTrace.of(run)
    (step_0,) = [s for s in spans if s.name == "step-0"]
    assert (step_0.span_id, step_0.parent_span_id) == (
        _hex(trace.step_span_id(1, 0)), _hex(trace.attempt_span_id(1))), "the step's own ids, under its claim"
    assert step_0.attributes["runwright.span.from_journal"] is True
    assert step_0.start_ns <= step_0.end_ns
    claims = {s.attributes["runwright.fence"]: s for s in spans if s.name == "attempt traced_steps"}
    lost, taking_over = claims[1], claims[2]
    assert lost.attributes["runwright.outcome"] == "worker_lost"
    assert lost.start_ns <= step_0.start_ns and step_0.end_ns <= lost.end_ns, "the step within its claim"
    assert {s.name: s.attributes["runwright.attempt"] for s in spans} == {
        "run traced_steps": 1, "attempt traced_steps": 1, "step-0": 1, "step-1": 1, "step-2": 1}
    assert (lost.attributes["runwright.attempt"], taking_over.attributes["runwright.attempt"]) == (1, 1), \
        "a takeover continues attempt 1"
    _assert_no_argument_values(spans)


async def test_every_view_numbers_a_retried_and_taken_over_runs_attempts_alike(
        traced_app: rw.App, store_url: str, tmp_path, fleet: WorkerFleet, receiver: OtlpReceiver) -> None:
    """Attempt 1 fails and is retried; attempt 2 is taken over after a SIGKILL and ends on
    another worker. The library, the `started` events, the spans, the HTTP API and
    `runwright show` all say: attempt 1 (fence 1, retrying), attempt 2 (fence 2, taken
    over), attempt 2 (fence 3, succeeded); the run is on attempt 2."""
    async with serving(store_url, tmp_path, {}) as base:
        first = fleet.start(env=receiver.env(), app_spec=TRACE_APP)
        handle = await traced_app.submit(trace_apps.retried_then_taken_over, secret=SECRET)
        await wait_until(lambda: ("gate-1", handle.id, 2, first.pid) in fleet.ledger_lines(),
                         "attempt 2 waits at step 1's gate")
        # Attempt 1's span ended before attempt 2 began, but the exporter sends in batches:
        # a SIGKILL inside its delay loses what it holds, so the kill waits until it is out.
        await wait_until(lambda: any(s.name.startswith("attempt ")
                                     and s.attributes.get("runwright.fence") == 1
                                     for s in _of_run(receiver, handle.id)), "attempt 1's span is out")
        first.kill()
        fleet.open_gate(handle.id, 1)
        fleet.start(env=receiver.env(), app_spec=TRACE_APP)
        run = await wait_until(lambda: _ended(traced_app, handle.id), "the run ends on the second worker")
        assert (run.state, run.value(), run.attempt, run.fence) == (RunState.SUCCEEDED, 2, 2, 3)
        claims = [(1, 1, "retrying"), (2, 2, "taken over"), (2, 3, "succeeded")]

        attempts = await traced_app.attempts(handle.id)
        assert [(a.attempt, a.fence, a.outcome) for a in attempts] == claims, "the library"
        started = [e.data for e in await _events(traced_app, handle.id) if e.kind == "started"]
        assert [(d["attempt"], d["fence"]) for d in started] == [(a, f) for a, f, _ in claims], "the events"
        async with httpx.AsyncClient(base_url=base, headers=as_(OPERATOR_TOKEN)) as http:
            api_run = (await http.get(f"/runs/{handle.id}")).json()
            api_attempts = (await http.get(f"/runs/{handle.id}/attempts")).json()
        assert (api_run["attempt"], api_run["max_attempts"]) == (2, 2), "the API's run"
        assert [(a["attempt"], a["fence"], a["outcome"]) for a in api_attempts] == claims, "the API's list"
        shown = subprocess.run([sys.executable, "-m", "runwright", "show", str(handle.id), "--json",
                                "--url", store_url], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        cli = json.loads(shown.stdout)
        assert cli["run"]["attempt"] == 2, "runwright show's run"
        assert [(a["attempt"], a["fence"], a["outcome"]) for a in cli["attempts"]] == claims, "runwright show"

        spans = await wait_until(
            lambda: (found := _of_run(receiver, handle.id)) and any(s.name.startswith("run ") for s in found)
            and sum(s.name.startswith("attempt ") for s in found) == 3 and found, "every claim's span is out")
        by_fence = {s.attributes["runwright.fence"]: s.attributes["runwright.attempt"]
                    for s in spans if s.name.startswith("attempt ")}
        assert by_fence == {fence: attempt for attempt, fence, _ in claims}, "the spans of the claims"
        for span in spans:
            if "runwright.fence" in span.attributes:
                assert span.attributes["runwright.attempt"] == by_fence[span.attributes["runwright.fence"]], \
                    span.name
        assert _named(spans, "run retried_then_taken_over").attributes["runwright.attempt"] == 2


async def _events(app: rw.App, run_id: int) -> list[Event]:
    return [event async for event in app.events(run_id, follow=False)]


async def test_a_submitted_traceparent_is_continued_by_the_run_and_its_child(
        traced_app: rw.App, fleet: WorkerFleet, receiver: OtlpReceiver) -> None:
    trace_hex, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    fleet.start(env=receiver.env(), app_spec=TRACE_APP)
    handle = await traced_app.submit(trace_apps.traced_parent, secret=SECRET,
                                     traceparent=f"00-{trace_hex}-{caller_span}-01")
    parent = await wait_until(lambda: _ended(traced_app, handle.id), "the parent ends")
    assert parent.state is RunState.SUCCEEDED, parent.error
    (child,) = await traced_app.list_runs(task="traced_child")

    def both_roots() -> list[ReceivedSpan]:
        found = [s for s in receiver.received() if s.trace_id == trace_hex]
        return found if sum(s.name.startswith("run ") for s in found) == 2 else []

    spans = await wait_until(both_roots, "both runs' own spans are exported")
    assert {s.attributes.get("runwright.run.id") for s in spans} == {parent.id, child.id}
    assert [s for s in receiver.received() if s.trace_id != trace_hex] == [], "no other trace"
    parent_root = _named(spans, "run traced_parent")
    assert parent_root.parent_span_id == caller_span, "the run sits under the submitter's span"
    submit_span = _named(spans, "submit:traced_child")
    child_root = _named(spans, "run traced_child")
    assert child_root.parent_span_id == submit_span.span_id, "the child under the step that submitted it"
    assert child.traceparent == f"00-{trace_hex}-{submit_span.span_id}-01"
    child_work = _named(spans, "child-work")
    assert child_work.attributes["runwright.run.id"] == child.id
    child_attempt = _named([s for s in spans if s.attributes["runwright.run.id"] == child.id],
                           "attempt traced_child")
    assert (child_work.parent_span_id, child_attempt.parent_span_id) == (
        child_attempt.span_id, child_root.span_id)
    _assert_no_argument_values(spans)


@pytest.mark.parametrize("backend", ["sqlite"])  # the spans are the agent loop's, on any store
async def test_an_agents_model_and_tool_calls_are_spans_without_content(
        app: rw.App, store_url: str, tmp_path, receiver: OtlpReceiver) -> None:
    agents = AgentFleet(store_url, tmp_path)
    model = agents.serve_model(ask_once_then_report("prepare", {"order": SECRET}))
    try:
        WorkerFleet.start(agents, app_spec=AGENT_APP, env={
            agent_apps.LEDGER_ENV: str(agents.ledger), "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test", **receiver.env()})
        app.tasks.update(agent_apps.app.tasks)
        handle = await app.submit("assistant", input=f"prepare the order {SECRET}")
        run = await wait_until(lambda: _ended(app, handle.id), "the agent's run ends")
        assert run.state is RunState.SUCCEEDED, run.error
        spans = await wait_until(
            lambda: (found := _of_run(receiver, handle.id)) and any(s.name.startswith("run ") for s in found)
            and found, "the run's own span is exported")
    finally:
        agents.close()
    models = [s for s in spans if s.name == "model"]
    assert len(models) == 2, "two model calls: the tool call, then the answer"
    for span in models:
        assert span.attributes["gen_ai.request.model"] == agent_apps.MODEL
        assert (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"]) \
            == (10, 5)
    tool = _named(spans, "tool:prepare")
    assert (tool.attributes["gen_ai.tool.name"], tool.attributes["runwright.tool.delivery"]) == (
        "prepare", "at_least_once")
    trace = RunTrace.of(run)
    attempt = _hex(trace.attempt_span_id(run.fence))
    assert {s.parent_span_id for s in [*models, tool]} == {attempt}, "steps of the one attempt"
    _assert_no_argument_values(spans)
