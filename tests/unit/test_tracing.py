"""The trace of a run, computed alike on every machine, and what the OTEL_* settings ask."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from runwright.errors import ConfigError, InvalidInput
from runwright.observe._exporting import setup_tracing, wanted
from runwright.observe._trace_context import RunTrace, check_traceparent
from runwright.runs import Run, RunState

RUN = Run(7, "k", "t", "default", 2, RunState.RUNNING, "{}", 1, 3, 1, 1.0, 1_800_000_000.25)


def test_a_run_without_traceparent_has_a_trace_derived_from_its_identity() -> None:
    trace = RunTrace.of(RUN)
    assert trace == RunTrace.of(dataclasses.replace(RUN, fence=5, attempt=2)), "the same on every claim"
    assert trace.trace_id != RunTrace.of(dataclasses.replace(RUN, id=8)).trace_id
    assert trace.trace_id != RunTrace.of(dataclasses.replace(RUN, created_at=2.0)).trace_id, \
        "another deployment's run 7 is another trace"
    ids = {trace.root_span_id, trace.attempt_span_id(1), trace.attempt_span_id(2),
           trace.step_span_id(1, 0), trace.step_span_id(2, 0), trace.step_span_id(1, 1)}
    assert len(ids) == 6 and all(0 < i < 2**64 for i in ids)
    assert (trace.parent_span_id, trace.sampled) == (None, True)


def test_a_submitted_traceparent_gives_the_trace_and_the_parent() -> None:
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    trace = RunTrace.of(dataclasses.replace(RUN, traceparent=given))
    assert (trace.trace_id, trace.parent_span_id) == (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7)
    assert not trace.sampled, "the submitter's sampling decision is kept"
    assert trace.traceparent(0xAB) == "00-4bf92f3577b34da6a3ce929d0e0e4736-00000000000000ab-00"


@pytest.mark.parametrize("value", [
    "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "00-xyz", 42,
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"])
def test_a_malformed_traceparent_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="traceparent"):
        check_traceparent(value)


def test_a_traceparent_is_stored_normalised() -> None:
    assert check_traceparent(" 00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01 ") == \
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert check_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later") == \
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a later version, read as 00"
    assert check_traceparent(None) is None


def test_the_environment_says_which_exporters() -> None:
    assert wanted({}) == []
    assert wanted({"OTEL_TRACES_EXPORTER": "otlp"}) == ["otlp"]
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}) == ["otlp"]
    assert wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}) == []
    assert wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) == []
    assert setup_tracing({}) is None, "nothing asked: nothing set up"


@pytest.mark.parametrize(("env", "named"), [
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER")])
def test_a_setting_this_build_cannot_honour_names_itself(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        setup_tracing(env)


def test_spans_start_once_a_provider_is_set_after_the_api_was_imported_without_one() -> None:
    # Libraries import the OpenTelemetry API without setting a provider (redis-py does):
    # runwright then traces nothing, cheaply, and starts tracing when a provider is set.
    probe = ("import opentelemetry.trace as api, runwright.observe._spans as t; "
             "from opentelemetry.sdk.trace import TracerProvider; "
             "before = t.active(); api.set_tracer_provider(TracerProvider()); "
             "print(before, t.active())")
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert seen.stdout.split() == ["False", "True"]
