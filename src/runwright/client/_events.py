"""Events awaited by key, published: `publish_event` delivers an event to every run of
the publisher's tenant waiting for it (`ctx.wait_event`) whose match fits, and starts a
run of each task declared to start on it (`@app.task(on_event=...)`).

The delivery is the store's, in one write keyed by the event's id (core._events). The
runs it starts are submitted next, each under the key `event:<id>:<task>`: a publish of
the same id again, or another publisher racing with it, finds the same runs, so an id
starts each task's run once; and a publish retried after it died between the two writes
starts what the first did not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..core import _inputs as inputs
from ..core._events import EventPublished, check_event_name, event_id_or_new
from ..store._connections import driver_connection
from ..store._event_params import EventPublishParams
from ..tasks._serde import encode
from ..tasks._specs import TaskSpec
from ..tasks._submission import Submission, check_key_reuse, insert_params

if TYPE_CHECKING:
    from ..engine._runtime import Runtime

__all__ = ["PublishingEvents", "started_key"]


def started_key(event_id: str, task: str) -> str:
    """The key of the run an event starts of a task: one per event id and task."""
    return f"event:{event_id}:{task}"


class PublishingEvents(ABC):
    """`publish_event` of a scope (`RunScope` mixes this in)."""

    _runtime: Runtime
    _ready: Callable[[], Awaitable[object]]
    tenant_name: str | None

    @abstractmethod
    def _tenant_for(self, given: str | None) -> str | None: ...

    async def publish_event(self, name: str, data: Any = None, *, id: str | None = None,
                            by: str | None = None, connection: Any = None) -> EventPublished:
        """Publish event `name` with `data` (any JSON value; a wait's match reads an
        object's fields) in this scope's tenant (the App's own: the runs of no tenant):
        every run of the tenant waiting for it (`ctx.wait_event(name, match=...)`, the
        wait begun before this publish) whose match fits gets `data`, once, and is woken;
        each task declared `on_event=name` gets a new run, given `data` as `event`.

        Idempotent by `id` (a fresh one when not given; the result says which): publishing
        an id again delivers nothing again and starts nothing again (`existed`), and the
        same id with another name or data is KeyConflict. The result lists the runs woken,
        those not delivered to for their pending signals' cap (`full`), and the runs
        started.

        `connection`: the caller's open transaction on the store's database, as
        `submit`'s: the event is kept and delivered, and its runs started, if and only if
        it commits (the runs it wakes stay locked to that commit). Redis refuses it."""
        check_event_name(name)
        event_id = event_id_or_new(id)
        limits = self._runtime.limits
        body = encode(data, f"the data of event {name!r}", limits.max_payload_bytes)
        who = inputs.answerer(by if by is not None else (self.tenant_name or "operator"))
        tenant = self._tenant_for(None)
        starts = [spec for spec in self._runtime.registry.tasks.values() if spec.on_event == name]
        await self._ready()
        store = self._runtime.store
        params = EventPublishParams(event_id, name, body, by=who, tenant=tenant,
                                    max_pending=limits.max_pending_signals)
        if connection is None:
            published = await store.event_publish(params)
        else:
            connection = await driver_connection(connection)
            published = await store.event_publish_in(connection, params)
        started = await self._start(starts, event_id, data, tenant, connection) if starts else []
        return replace(published, started=started)

    async def _start(self, specs: list[TaskSpec], event_id: str, data: Any, tenant: str | None,
                     connection: Any = None) -> list[int]:
        """The event's runs, one per task, keyed by the event: the new ones' ids."""
        now_s, registry = self._runtime.clock(), self._runtime.registry
        params = [insert_params(spec, spec.bind((), {"event": data}),
                                Submission(key=started_key(event_id, spec.name), tenant=tenant),
                                now_s=now_s, limits=self._runtime.limits, version=registry.version)
                  for spec in sorted(specs, key=lambda s: s.name)]
        store = self._runtime.store
        runs = await (store.run_insert_many(params) if connection is None
                      else store.run_insert_in(connection, params))
        for run, made in zip(runs, params):
            check_key_reuse(run, made, "reject")
        # A run flow control answered with (a debounced, batched or dropped submission) is not new.
        return [run.id for run in runs if not run.existed
                and run.outcome not in ("debounced", "batched", "dropped")]
