"""Events awaited by key over HTTP: `POST /events` publishes an event in the caller's
tenant (the operator's: the runs of no tenant), delivering it to the runs waiting for it
(`ctx.wait_event`) whose match fits and starting the runs of the tasks declared to start
on it, in this server (which loads the app that declares them).

Who published is the caller's token; a body's `by` only adds a name to it."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import FastAPI, Response
from pydantic import BaseModel, ConfigDict, Field

from ..client._scope import RunScope
from ..core._events import MAX_EVENT_ID_CHARS, EventPublished
from ._deps import Tenant

__all__ = ["EventIn", "EventOut", "add_event_routes"]


class EventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-/]+$",
                      description="The event's name: what `ctx.wait_event(name, match=...)` waits for.")
    data: Any = Field(None, description="Any JSON value, up to the payload limit; a wait's match "
                                        "reads an object's fields.")
    id: str | None = Field(None, min_length=1, max_length=MAX_EVENT_ID_CHARS,
                           description="The event's id: published again, it delivers and starts nothing "
                                       "again. A fresh one when not given.")
    by: str | None = Field(None, min_length=1, max_length=100,
                           description="A name added to the caller's identity, e.g. a service's.")


class EventOut(BaseModel):
    id: str
    name: str
    woken: list[int] = Field(description="The runs whose waits it was delivered to (and woke), once.")
    full: list[int] = Field(description="Runs whose wait fits but which keep as many pending signals as "
                                        "they may: not delivered to.")
    started: list[int] = Field(description="The runs it started, of the tasks declared on_event (new ones).")
    existed: bool = Field(description="The id was published before: nothing delivered again; woken and "
                                      "full are the first publish's.")

    @classmethod
    def of(cls, published: EventPublished) -> EventOut:
        return cls(**published.as_json())


def add_event_routes(api: FastAPI, scope_of: Callable[[str | None], RunScope]) -> None:
    @api.post("/events", status_code=201, response_model=EventOut,
              responses={200: {"model": EventOut, "description": "The id was published before"}})
    async def publish_event(body: EventIn, response: Response, who: Tenant) -> EventOut:
        """Publish an event in the caller's tenant: delivered once to every run of the tenant
        waiting for it whose match fits (woken), and starting a run of each task declared
        to start on it. 201 when published, 200 when the id was published before (nothing
        delivered or started again); 409 for the id with another name or data."""
        identity = who or "operator"
        published = await scope_of(who).publish_event(
            body.name, body.data, id=body.id, by=identity if body.by is None else f"{identity}:{body.by}")
        if published.existed:
            response.status_code = 200
        return EventOut.of(published)
