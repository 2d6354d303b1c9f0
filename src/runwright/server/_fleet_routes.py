"""`GET /fleet` (the census) and `POST /fleet/broadcast` (an op and its report): the
operator's, as the fleet is the deployment's, never a tenant's."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from ..app import App

__all__ = ["add_fleet_routes"]


class BroadcastIn(BaseModel):
    op: str = Field(min_length=1, max_length=200)
    payload: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0, le=600)
    targets: list[str] | None = None


def add_fleet_routes(api: FastAPI, app: App, operator_only: dict[str, Any]) -> None:
    @api.get("/fleet", **operator_only)
    async def fleet_census() -> dict[str, Any]:
        """Every live process of this app's fleet: name, generation, state, host, pid,
        heartbeat age."""
        return {"root": app.fleet.root, "processes": await app.fleet.workers()}

    @api.post("/fleet/broadcast", **operator_only)
    async def fleet_broadcast(body: BroadcastIn) -> dict[str, Any]:
        """Send an op to every live process (or `targets`); one row per process with its
        outcome. `ok` is true only when every row is `applied`."""
        rows = await app.fleet.broadcast(body.op, body.payload, timeout_s=body.timeout_s,
                                         targets=body.targets)
        return {"ok": bool(rows) and all(row.outcome == "applied" for row in rows),
                "report": [row.to_dict() for row in rows]}
