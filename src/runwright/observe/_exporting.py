"""Setting up the OpenTelemetry SDK in a worker, from the standard OTEL_* variables.

Only when the SDK is installed (`pip install runwright[otel]`) and the environment asks
for traces: `OTEL_TRACES_EXPORTER` (`otlp`, `console`; `none` turns it off) or an OTLP
endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). The
exporter, batch processor, sampler and resource read the rest of the standard variables
themselves (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`, `OTEL_BSP_SCHEDULE_DELAY`,
`OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, ...). A provider the process already set
(the user's own) is left alone.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

from ..errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator

__all__ = ["setup_tracing"]

HTTP_PROTOBUF = "http/protobuf"


def wanted(env: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for ([] for none)."""
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return []
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not names and endpoint:
        names = ["otlp"]
    return [name for name in names if name != "none"]


def setup_tracing(env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Install a tracer provider exporting as the environment says; None if it asks for
    nothing, the SDK is missing, or a provider is already set. A setting this build
    cannot honour is a ConfigError naming it."""
    env = os.environ if env is None else env
    exporters = wanted(env)
    if not exporters:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(f"OTEL_TRACES_EXPORTER/endpoint ask for traces ({','.join(exporters)}) but "
                          "the OpenTelemetry SDK is not installed: pip install 'runwright[otel]'") from None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    resource = Resource.create({} if env.get("OTEL_SERVICE_NAME") else {"service.name": "runwright"})
    provider = TracerProvider(resource=resource, id_generator=_derived_ids())
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, env)))
    trace.set_tracer_provider(provider)
    return provider


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ConfigError(f"OTEL_TRACES_EXPORTER={name!r} is not supported: use otlp, console or none")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") \
        or HTTP_PROTOBUF
    if protocol != HTTP_PROTOBUF:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: "
                          f"runwright[otel] exports OTLP over {HTTP_PROTOBUF}")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout, compression: from OTEL_EXPORTER_OTLP_*


def _derived_ids() -> IdGenerator:
    """The SDK's IdGenerator, giving each span the id runwright derived for it (see
    telemetry: the SDK asks with no arguments, so the id travels in a context variable);
    a span runwright did not start (the user's own) gets random ids, as usual."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

    from ._spans import DERIVED_IDS

    class DerivedIds(IdGenerator):
        _random = RandomIdGenerator()

        def generate_span_id(self) -> int:
            derived = DERIVED_IDS.get()
            return derived[1] if derived is not None else self._random.generate_span_id()

        def generate_trace_id(self) -> int:
            derived = DERIVED_IDS.get()
            return derived[0] if derived is not None else self._random.generate_trace_id()

    return DerivedIds()
