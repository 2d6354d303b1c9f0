"""The schedules API: list, create (or redefine), delete, pause and resume schedules.
Schedules are the deployment's, never a tenant's: every route is the operator's."""

from __future__ import annotations

from fastapi import FastAPI, Response

from ..app import App
from ._deps import OPERATOR_ONLY
from ._models import ScheduleIn, ScheduleOut

__all__ = ["add_schedule_routes"]


def add_schedule_routes(api: FastAPI, app: App) -> None:
    @api.get("/schedules", response_model=list[ScheduleOut], **OPERATOR_ONLY)
    async def schedules() -> list[ScheduleOut]:
        """Schedules with their next fire times (their arguments are not shown). Schedules
        are the deployment's: creating, listing, pausing, resuming and deleting them is
        the operator's."""
        return [ScheduleOut.of(s) for s in await app.list_schedules()]

    @api.post("/schedules", status_code=201, response_model=ScheduleOut,
              dependencies=OPERATOR_ONLY["dependencies"], responses={
                  **OPERATOR_ONLY["responses"],
                  200: {"model": ScheduleOut, "description": "The name was redefined"}})
    async def create_schedule(body: ScheduleIn, response: Response) -> ScheduleOut:
        """Create a schedule, or redefine the one of that name (200). A schedule declared
        in the deployment's code takes its code's definition again when a worker starts."""
        existed = any(s.name == body.name for s in await app.list_schedules())
        spec = app.schedule_spec(body.name, cron=body.cron, task=body.task, args=body.args, tz=body.tz,
                                 misfire=body.misfire, catch_up_limit=body.catch_up_limit,
                                 queue=body.queue, priority=body.priority)
        if existed:
            response.status_code = 200
        return ScheduleOut.of(await app.save_schedule(spec))

    @api.delete("/schedules/{name}", status_code=204, **OPERATOR_ONLY)
    async def delete_schedule(name: str) -> Response:
        await app.delete_schedule(name)
        return Response(status_code=204)

    @api.post("/schedules/{name}/pause", status_code=204, **OPERATOR_ONLY)
    async def pause(name: str) -> Response:
        await app.pause_schedule(name)
        return Response(status_code=204)

    @api.post("/schedules/{name}/resume", status_code=204, **OPERATOR_ONLY)
    async def resume(name: str) -> Response:
        await app.resume_schedule(name)
        return Response(status_code=204)
