"""The threads API: a thread is the conversation its runs join. Create a thread's id,
list threads, read one (its history, runs and log), follow its log over server-sent
events, cancel its open runs, delete it. The operator may act on a tenant's thread
with `tenant`; a deleted thread answers 410, even once its name names a new one."""

from __future__ import annotations

import json
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Query, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..client._scope import RunScope
from ..core import _inputs as inputs
from ..errors import InvalidInput, ThreadDeleted
from ._decode import seal_tenant
from ._deps import After, Before, Incarnation, LastEventId, Scopes, Tenant, TenantFilter, ThreadName
from ._models import (
    RunOut,
    RunPage,
    ThreadEventOut,
    ThreadEventPage,
    ThreadInfoOut,
    ThreadOut,
    ThreadPage,
    cursor_of,
    thread_cursor,
)
from ._sse import SSE_SEP, event_stream, opening

__all__ = ["add_thread_routes"]


def add_thread_routes(api: FastAPI, scopes: Scopes, ping_s: float) -> None:
    """`ping_s`: the keep-alive interval of a thread's event stream."""

    @api.post("/threads", status_code=201)
    async def create_thread(who: Tenant) -> dict[str, str]:
        """A new thread id; the thread comes to exist with its first run."""
        return {"thread": uuid.uuid4().hex}

    @api.get("/threads", response_model=ThreadPage,
             responses={403: {"description": "A tenant's token named another tenant"}})
    async def list_threads(who: Tenant, limit: int = Query(50, ge=1, le=500),
                           after: str | None = Query(None, min_length=1, max_length=2000),
                           include_deleted: bool = False, tenant: TenantFilter = None) -> ThreadPage:
        """Threads, newest first (by creation): the caller's own, or with an operator token
        every tenant's (`tenant` narrows to one). `after` is the cursor; deleted threads
        are listed (marked) only with `include_deleted`."""
        cursor = None if after is None else thread_cursor(after)
        found = await scopes.narrowed(who, tenant).list_threads(limit=limit, after=cursor,
                                                                include_deleted=include_deleted)
        return ThreadPage(items=[ThreadOut.of(t) for t in found],
                          next_cursor=cursor_of(found[-1]) if len(found) == limit else None)

    @api.get("/threads/{thread}", response_model=ThreadInfoOut)
    async def thread_info(thread: ThreadName, who: Tenant, incarnation: Incarnation = None,
                          tenant: TenantFilter = None) -> ThreadInfoOut:
        """The thread that bears this name, with its `incarnation` (404 before its first run,
        410 once deleted, or once the name names a thread other than `incarnation`)."""
        return ThreadInfoOut.of(await scopes.narrowed(who, tenant).thread_info(thread, incarnation))

    @api.get("/threads/{thread}/messages")
    async def thread_messages(thread: ThreadName, who: Tenant, incarnation: Incarnation = None,
                              tenant: TenantFilter = None) -> dict[str, Any]:
        """A thread's history (410 once deleted, or once the name names a thread other than
        `incarnation`); `tenant`: the operator reads a tenant's thread."""
        scope = scopes.narrowed(who, tenant)
        seal_tenant(tenant, f"thread {thread}")
        messages = await scope.thread_history(thread, incarnation)
        return {"thread": thread, "messages": messages}

    @api.get("/threads/{thread}/runs", response_model=RunPage)
    async def thread_runs(thread: ThreadName, who: Tenant, before: Before = None,
                          limit: int = Query(50, ge=1, le=500), incarnation: Incarnation = None,
                          tenant: TenantFilter = None) -> RunPage:
        """The runs of the thread that bears this name now, newest first (not those of an
        earlier thread of the name, deleted), or of the thread `incarnation` (410 once the
        name names another)."""
        scope = scopes.narrowed(who, tenant)
        runs = await scope.list_runs(thread=thread, limit=limit, before_id=before, incarnation=incarnation)
        return RunPage.page(runs, limit, await scope.waiting(runs))

    @api.get("/threads/{thread}/events", response_model=ThreadEventPage)
    async def thread_events(thread: ThreadName, who: Tenant, after: After = 0,
                            incarnation: Incarnation = None, tenant: TenantFilter = None) -> ThreadEventPage:
        """A page of the thread's log: every run's events, numbered per thread (`tseq`), of
        the thread `incarnation` (410 once the name names another), else of the thread
        that bears the name now (the page says which)."""
        scope = scopes.narrowed(who, tenant)
        seal_tenant(tenant, f"thread {thread}")
        held = (await scope.thread_info(thread, incarnation)).incarnation
        page = await scope.thread_events_page(thread, after, incarnation=held)
        return ThreadEventPage(items=[ThreadEventOut.of_thread(e) for e in page],
                               next_after=page[-1].tseq if page else after, incarnation=held)

    @api.get("/threads/{thread}/events/stream", response_class=EventSourceResponse,
             responses={200: {"content": {"text/event-stream": {}}}})
    async def thread_stream(thread: ThreadName, who: Tenant, after: After = 0,
                            incarnation: Incarnation = None, last_event_id: LastEventId = None,
                            tenant: TenantFilter = None) -> Response:
        """Server-sent events of the whole thread, run after run, each with the id
        `<incarnation>:<tseq>`: replays after `after` (or the Last-Event-ID a reconnecting
        client sends), then follows live for as long as the client stays. It follows one
        thread (`incarnation`, the Last-Event-ID's, else the one that bears the name now):
        a `thread_deleted` event ends it once that thread is deleted, and a reconnect to
        it is 410, even when a new thread has taken the name. `tenant`: the operator
        follows a tenant's thread."""
        scope = scopes.narrowed(who, tenant)
        seal_tenant(tenant, f"thread {thread}")
        resumed, start = _thread_event_id(last_event_id)
        start = after if start is None else start
        # A 404/410 now, not a broken stream.
        held = (await scope.thread_info(thread, resumed or incarnation)).incarnation
        return event_stream(_thread_events(scope, thread, start, held), ping_s)

    @api.post("/threads/{thread}/cancel", response_model=RunPage)
    async def cancel_thread(thread: ThreadName, who: Tenant, tenant: TenantFilter = None) -> RunPage:
        """Cancel every open run of the thread; the thread and its history stay. `tenant`:
        the operator cancels a tenant's thread."""
        cancelled = await scopes.narrowed(who, tenant).cancel_thread(thread)
        return RunPage(items=[RunOut.of(r) for r in cancelled], next_cursor=None)

    @api.delete("/threads/{thread}", status_code=204)
    async def delete_thread(thread: ThreadName, who: Tenant) -> Response:
        """Cancel the thread's open runs, wait for them, then delete it."""
        await scopes.of(who).delete_thread(thread)
        return Response(status_code=204)


def _thread_event_id(last_event_id: str | None) -> tuple[int | None, int | None]:
    """(incarnation, tseq) of a thread stream's Last-Event-ID: `<incarnation>:<tseq>` as
    the stream sends them, or a bare `<tseq>` (of the thread that bears the name now);
    InvalidInput (422) for any other text."""
    if not last_event_id:
        return None, None
    head, colon, tail = last_event_id.partition(":")
    if not colon:
        return None, inputs.sequence_text(head, "Last-Event-ID")
    try:
        incarnation = inputs.integer_text(head, "Last-Event-ID's incarnation", 1, inputs.MAX_ID)
    except InvalidInput:
        raise InvalidInput(f"Last-Event-ID must be <incarnation>:<tseq> or <tseq>, as the stream "
                           f"sent them, got {last_event_id!r}") from None
    return incarnation, inputs.sequence_text(tail, "Last-Event-ID's tseq")


async def _thread_events(scope: RunScope, thread: str, after: int,
                         incarnation: int) -> AsyncIterator[ServerSentEvent]:
    """The thread's events as the run stream's are framed, each with its incarnation and
    tseq as its id; a last `thread_deleted` event once that thread is gone."""
    yield opening(f"thread {thread} incarnation {incarnation} after {after}")
    try:
        async for item in scope.follow_thread(thread, after, incarnation=incarnation):
            data = ThreadEventOut.of_thread(item).model_dump_json()
            yield ServerSentEvent(data, id=f"{incarnation}:{item.tseq}", event=item.kind, sep=SSE_SEP)
    except ThreadDeleted as exc:
        data = json.dumps({"thread": thread, "incarnation": incarnation, "detail": str(exc)})
        yield ServerSentEvent(data, event="thread_deleted", sep=SSE_SEP)
