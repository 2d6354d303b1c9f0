"""How the server and its runs are doing: the probes (`/healthz`, `/readyz`, public, so
an orchestrator needs no token), the Prometheus metrics (the operator's: they count every
tenant's runs) and the caller's summary of its own runs."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Response

from ..app import App
from ..observe import _metrics as metrics
from ._deps import OPERATOR_ONLY, Scopes, Tenant
from ._problems import problem

__all__ = ["add_status_routes"]

# In OpenAPI: these operations need no bearer token (the authentication middleware lets
# the probes' paths through; this says so in the document).
NO_TOKEN: dict[str, Any] = {"security": []}


def add_status_routes(api: FastAPI, app: App, scopes: Scopes) -> None:
    @api.get("/healthz", openapi_extra=NO_TOKEN)
    async def healthz() -> dict[str, str]:
        """The process is alive."""
        return {"status": "ok"}

    @api.get("/readyz", openapi_extra=NO_TOKEN)
    async def readyz() -> Response:
        """The store answers."""
        try:
            await app.check_ready()
        except Exception as exc:  # any failure means "not ready", and says why
            return problem(503, "Store unavailable", str(exc))
        return Response(json.dumps({"status": "ready"}), media_type="application/json")

    @api.get("/metrics", response_class=Response, **OPERATOR_ONLY)
    async def prometheus() -> Response:
        """Prometheus text format: this process's counters and the store's gauges, over every
        tenant's runs (the operator's: scrape with an operator bearer token)."""
        return Response(await metrics.scrape(app), media_type="text/plain; version=0.0.4")

    @api.get("/summary")
    async def status_summary(who: Tenant) -> dict[str, Any]:
        """Pending, running, done, dead, workers alive, due runs no live worker can run
        (`unrunnable`), oldest due age (the dashboard's data), of the caller's own runs."""
        return await metrics.summary(scopes.of(who))
