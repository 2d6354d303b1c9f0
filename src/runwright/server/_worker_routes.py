"""`GET /workers`: the registered workers. They serve every tenant, so any caller may
list them (through its scope, as every route acts)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from ._deps import Scopes, Tenant

__all__ = ["add_worker_routes"]


def add_worker_routes(api: FastAPI, scopes: Scopes) -> None:
    @api.get("/workers")
    async def workers(who: Tenant) -> list[dict[str, Any]]:
        return [{"id": w.id, "host": w.host, "pid": w.pid, "queues": w.queues,
                 "started_at": w.started_at, "heartbeat_at": w.heartbeat_at}
                for w in await scopes.of(who).list_workers()]
