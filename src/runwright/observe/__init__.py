"""Observing runs: structured logs, Prometheus metrics, and traces (a run's trace ids,
its spans, the OpenTelemetry SDK's set-up). Nothing here decides anything; the engine,
the client side and the faces report through it."""
