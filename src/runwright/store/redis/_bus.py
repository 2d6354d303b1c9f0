"""The fleet's bus on Redis: presence as one hash per life with the life's TTL, messages by
pub/sub, one Lua script per operation (`bus_scripts/*.lua`, each headed by its KEYS and
ARGV).

Every key is under the store's own prefix and the fleet's root,
`rw:{<store namespace>}:fleet:<root>:`, so it shares the store's hash tag (one Cluster
slot) and a test's namespace cleanup. A pub/sub connection that drops loses what was
published meanwhile; it is taken again with a backoff, and a broadcast in the gap reads
`missing`, never applied.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any, Mapping

import redis.asyncio as aioredis

from .._bus import Census, Deliver, Hearing, Life, Presence, State, Writing, decode, encode
from ._errors import FAILURES, is_down, store_error
from ._listener import Subscription

__all__ = ["RedisBus"]

SCRIPTS = ("claim", "refresh", "delete", "census")


class RedisBus:
    def __init__(self, client_url: str, store_prefix: str, root: str) -> None:
        self.root = root
        self.prefix = f"{store_prefix}fleet:{root}:"
        self._client_url = client_url
        self._redis: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self._listener: Subscription | None = None

    def _client(self) -> aioredis.Redis:
        # The pid names the process to an operator reading CLIENT LIST.
        return aioredis.Redis.from_url(self._client_url, decode_responses=True,
                                       socket_connect_timeout=5, socket_timeout=30,
                                       client_name=f"runwright-fleet:{os.getpid()}")

    async def open(self) -> None:
        self._redis = self._client()
        folder = resources.files(__package__).joinpath("bus_scripts")
        # register_script calls by SHA and loads again after a SCRIPT FLUSH or a restart.
        self._scripts = {name: self._redis.register_script(folder.joinpath(f"{name}.lua").read_text())
                         for name in SCRIPTS}

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    def _key(self, name: str) -> str:
        return self.prefix + name

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self._scripts[script](keys=keys, args=args)
        except FAILURES as exc:
            if is_down(exc):
                raise store_error(exc) from exc
            raise

    async def census(self) -> Census:
        reply = await self._run("census", [self._key("names")], [self.prefix])
        return Census([_presence(_pairs(flat)) for flat in reply[1:]], float(reply[0]))

    async def slot_claim(self, kind: str, ordinal: int, writing: Writing) -> int | None:
        name = f"{kind}-{ordinal}"
        generation = await self._run(
            "claim", [self._key(f"life:{name}"), self._key("generations"), self._key("names")],
            [name, kind, ordinal, writing.state.value, writing.host, writing.pid, writing.drain_s,
             int(writing.ttl_s * 1000)])
        return None if generation is None else int(generation)

    async def presence_refresh(self, life: Life, writing: Writing) -> bool:
        kept = await self._run("refresh", [self._key(f"life:{life.name}")],
                               [life.generation, writing.state.value, writing.drain_s,
                                int(writing.ttl_s * 1000)])
        return bool(kept)

    async def presence_delete(self, life: Life) -> None:
        await self._run("delete", [self._key(f"life:{life.name}")], [life.generation])

    async def publish(self, message: Mapping[str, Any]) -> None:
        assert self._redis is not None, "fleet bus is not open"
        try:
            await self._redis.publish(self._key("bus"), encode(message))
        except FAILURES as exc:
            if is_down(exc):
                raise store_error(exc) from exc
            raise

    async def subscribe(self, deliver: Deliver, hearing: Hearing) -> None:
        if self._listener is None:
            deaf = False

            def up() -> None:
                nonlocal deaf
                if deaf:
                    deaf = False
                    hearing(True)

            def down() -> None:
                nonlocal deaf
                if not deaf and not subscription.stopping:
                    deaf = True
                    hearing(False)

            def message(_channel: str, data: str) -> None:
                decoded = decode(data)
                if decoded is not None:
                    deliver(decoded)

            subscription = Subscription(self._client, [self._key("bus")], message, up, down, "fleet")
            self._listener = subscription
            await subscription.start()


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _presence(fields: dict[str, str]) -> Presence:
    return Presence(kind=fields["kind"], ordinal=int(fields["ordinal"]),
                    generation=int(fields["generation"]), state=State(fields["state"]),
                    host=fields["host"], pid=int(fields["pid"]), drain_s=float(fields["drain_s"]),
                    claimed_at=float(fields["claimed_at"]), heartbeat_at=float(fields["heartbeat_at"]),
                    expires_at=float(fields["expires_at"]))
