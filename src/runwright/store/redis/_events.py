"""The Redis store's events awaited by key: wait registrations and publishes (core._events).

A publish reads its tenant's waiting registrations of the name (one hash), decides in
Python which fit (core._events.matches), and a script keeps the event by its id and
delivers to each fitting wait judged again there (still waiting, its run not ended, room
among its pending signals): see scripts/event_publish.lua."""

from __future__ import annotations

import json
from typing import Any

from ...core._events import EventPublished, EventWait, matches, wait_signal_name
from .._event_params import (
    EventPublishParams,
    EventReclaimParams,
    EventWaitCloseParams,
    EventWaitListParams,
    EventWaitParams,
)
from .._event_rules import republished
from .._hub import QUEUED, events_topic
from ._base import RedisBase

__all__ = ["RedisEvents"]

_ = wait_signal_name  # the script names the signal `event:<position>` as it does


def _scoped(tenant: str | None, name: str) -> str:
    """A tenant and a name as one unambiguous text (a tenant may hold a colon): the
    tenant's length in UTF-8 bytes first, as Lua's `#` counts it."""
    text = tenant or ""
    return f"{len(text.encode())}:{text}:{name}"


def _waiting(tenant: str | None, name: str) -> str:
    return f"evwaiting:{_scoped(tenant, name)}"


class RedisEvents(RedisBase):
    """Events awaited by key (`EventStore`)."""

    async def event_wait(self, params: EventWaitParams) -> bool:
        wait = json.dumps({"name": params.name, "tenant": params.tenant or "", "match": params.match})
        reply = await self._script("event_wait", self._now_arg(params.now), params.run_id, params.fence,
                                   params.position, wait, _waiting(params.tenant, params.name))
        return bool(reply[0] == "ok")

    async def event_wait_close(self, params: EventWaitCloseParams) -> bool:
        reply = await self._script("event_close", params.run_id, params.fence, params.position)
        return bool(reply[0] == "ok")

    async def event_wait_list(self, params: EventWaitListParams) -> list[EventWait]:
        kept = await self._call(self.redis.hgetall, self.key(f"evw:{params.run_id}"))
        waits = []
        for position, text in kept.items():
            fields = json.loads(text)
            waits.append(EventWait(params.run_id, int(position), fields["name"], json.loads(fields["match"]),
                                   fields["tenant"] or None, float(fields["registered_at"]), fields["state"],
                                   fields.get("event_id")))
        return sorted(waits, key=lambda w: w.position)

    async def event_reclaim(self, params: EventReclaimParams) -> int:
        return int(await self._script("event_reclaim", self._now_arg(params.now), float(params.max_age_s),
                                      params.limit))

    async def event_publish(self, params: EventPublishParams) -> EventPublished:
        waiting = _waiting(params.tenant, params.name)
        data = json.loads(params.data)
        found = await self._call(self.redis.hgetall, self.key(waiting))
        fits = sorted((member for member, match in found.items() if matches(json.loads(match), data)),
                      key=lambda m: tuple(int(part) for part in m.split(":")))
        kept = json.dumps({"name": params.name, "data": params.data, "published_by": params.by})
        reply = await self._script("event_publish", self._now_arg(params.now),
                                   _scoped(params.tenant, params.id), kept, waiting, params.data, params.by,
                                   params.max_pending, params.id, *fits)
        if reply[0] == "existed":
            first = json.loads(reply[1])
            return republished(params, first["name"], first["data"], _ids(first["woken"]),
                               _ids(first["full"]))
        woken, full = _ids(json.loads(reply[1])), _ids(json.loads(reply[2]))
        if woken:
            self.hub.fire(QUEUED)
            for run_id in woken:
                self.hub.fire(events_topic(run_id))
        return EventPublished(params.id, params.name, woken, full)


def _ids(listed: Any) -> list[int]:
    """Run ids as a script listed them (cjson encodes an empty list as {})."""
    return [int(i) for i in listed] if isinstance(listed, list) else []
